package v1alpha1

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/deploy"
)

// jsonFields returns the JSON names of t's fields (a struct).
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func keys(m map[string]apiextensionsv1.JSONSchemaProps) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestCRDMatchesTypes: deploy/crd-podcheckpoint.yaml declares exactly
// the fields of these types, in this group and version, with a status
// subresource, so that what the reporter writes is what the API server
// keeps (a field missing from the schema would be pruned).
func TestCRDMatchesTypes(t *testing.T) {
	objs, err := deploy.Objects()
	if err != nil {
		t.Fatal(err)
	}
	var crd *apiextensionsv1.CustomResourceDefinition
	for _, o := range objs {
		if c, ok := o.Object.(*apiextensionsv1.CustomResourceDefinition); ok && c.Spec.Names.Kind == "PodCheckpoint" {
			crd = c
		}
	}
	if crd == nil {
		t.Fatal("deploy/ has no CustomResourceDefinition of PodCheckpoint")
	}
	if crd.Spec.Group != GroupName || crd.Name != "podcheckpoints."+GroupName || crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Errorf("CRD %s: group %s, scope %s", crd.Name, crd.Spec.Group, crd.Spec.Scope)
	}
	root := checkVersionSchema(t, crd, reflect.TypeFor[PodCheckpointSpec](), reflect.TypeFor[PodCheckpointStatus]())
	phases := root["status"].Properties["phase"].Enum
	if len(phases) != 4 {
		t.Errorf("phase enum %v, want the 4 phases", phases)
	}
}

// TestPodMigrationCRDMatchesTypes: deploy/crd-podmigration.yaml declares
// exactly the fields of the PodMigration types, with a status subresource.
func TestPodMigrationCRDMatchesTypes(t *testing.T) {
	b, err := deploy.Manifests.ReadFile("crd-podmigration.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := deploy.Decode("crd-podmigration.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("%d objects, want the CRD alone", len(objs))
	}
	crd, ok := objs[0].(*apiextensionsv1.CustomResourceDefinition)
	if !ok || crd.Spec.Names.Kind != "PodMigration" || crd.Spec.Group != GroupName || crd.Name != "podmigrations."+GroupName ||
		crd.Spec.Scope != apiextensionsv1.NamespaceScoped {
		t.Fatalf("not the namespaced CRD of PodMigration: %+v", objs[0])
	}
	root := checkVersionSchema(t, crd, reflect.TypeFor[PodMigrationSpec](), reflect.TypeFor[PodMigrationStatus]())
	var phases, modes []string
	for _, p := range root["status"].Properties["phase"].Enum {
		phases = append(phases, strings.Trim(string(p.Raw), `"`))
	}
	for _, m := range root["spec"].Properties["mode"].Enum {
		modes = append(modes, strings.Trim(string(m.Raw), `"`))
	}
	wantPhases := []string{string(MigrationPending), string(MigrationCheckpointing), string(MigrationTransferring),
		string(MigrationRestoring), string(MigrationSucceeded), string(MigrationFailed)}
	if !slices.Equal(phases, wantPhases) {
		t.Errorf("phase enum %v, want %v", phases, wantPhases)
	}
	if want := []string{"", string(ModeStopAndCopy), string(ModePreCopy), string(ModeLazy)}; !slices.Equal(modes, want) {
		t.Errorf("mode enum %v, want %v", modes, want)
	}
}

// checkVersionSchema checks that crd serves Version alone, stored, with a
// status subresource, and that its schema's spec, status and conditions
// declare exactly the JSON fields of spec, status and condition.Condition;
// it returns the schema's top-level properties.
func checkVersionSchema(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, spec, status reflect.Type) map[string]apiextensionsv1.JSONSchemaProps {
	t.Helper()
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != Version || !crd.Spec.Versions[0].Storage ||
		crd.Spec.Versions[0].Subresources == nil || crd.Spec.Versions[0].Subresources.Status == nil {
		t.Fatalf("CRD versions %+v: want %s alone, stored, with a status subresource", crd.Spec.Versions, Version)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	for _, tt := range []struct {
		what   string
		schema map[string]apiextensionsv1.JSONSchemaProps
		typ    reflect.Type
	}{
		{"spec", root["spec"].Properties, spec},
		{"status", root["status"].Properties, status},
		{"status.conditions[]", root["status"].Properties["conditions"].Items.Schema.Properties, reflect.TypeFor[condition.Condition]()},
	} {
		if got, want := keys(tt.schema), jsonFields(tt.typ); !slices.Equal(got, want) {
			t.Errorf("%s: the CRD declares %v, the type has %v", tt.what, got, want)
		}
	}
	return root
}
