// Package deploy holds nodeshim's Kubernetes manifests (a kustomize
// directory: Namespace, ServiceAccount, RBAC, the shim's ConfigMap and the
// DaemonSet; the controller's Namespace, ServiceAccount, RBAC and
// Deployment) and embeds them, so that tests and tools read exactly the
// files `kubectl apply -k deploy/` applies.
package deploy

import (
	"bufio"
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Manifests is the kustomize directory: kustomization.yaml and the
// resources it lists.
//
//go:embed *.yaml
var Manifests embed.FS

// KustomizationFile is the name of the kustomize entry point in Manifests.
const KustomizationFile = "kustomization.yaml"

// Kustomization is the part of kustomization.yaml that nodeshim uses.
// Decoding is strict, so a field added to the file must be added here.
type Kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// ErrUnknownKind is returned, wrapped with the file name, for a document
// whose kind this package does not decode.
var ErrUnknownKind = errors.New("unknown kind")

// Object is one decoded Kubernetes object and the file it came from.
type Object struct {
	// File is the manifest's name in Manifests.
	File string
	// Object is the typed object (*corev1.Namespace, *appsv1.DaemonSet, ...).
	Object runtime.Object
}

// ReadKustomization decodes kustomization.yaml strictly.
func ReadKustomization() (Kustomization, error) {
	var k Kustomization
	data, err := Manifests.ReadFile(KustomizationFile)
	if err != nil {
		return k, fmt.Errorf("read %s: %w", KustomizationFile, err)
	}
	if err := unmarshalStrict(data, &k); err != nil {
		return k, fmt.Errorf("decode %s: %w", KustomizationFile, err)
	}
	return k, nil
}

// Objects decodes every resource that kustomization.yaml lists, in order,
// strictly: an unknown or duplicated field, or an unknown kind, is an
// error naming the file.
func Objects() ([]Object, error) {
	k, err := ReadKustomization()
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, name := range k.Resources {
		data, err := Manifests.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		objs, err := Decode(name, data)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			out = append(out, Object{File: name, Object: o})
		}
	}
	return out, nil
}

// Decode decodes every YAML document of data into its k8s.io/api type,
// strictly. name identifies data in errors.
func Decode(name string, data []byte) ([]runtime.Object, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if j, err := yaml.YAMLToJSON(doc); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		} else if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		obj, err := newObject(tm)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", name, i, err)
		}
		if err := unmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", name, i, tm.Kind, err)
		}
		out = append(out, obj)
	}
}

func newObject(tm metav1.TypeMeta) (runtime.Object, error) {
	switch tm.GroupVersionKind().String() {
	case "/v1, Kind=Namespace":
		return &corev1.Namespace{}, nil
	case "/v1, Kind=ServiceAccount":
		return &corev1.ServiceAccount{}, nil
	case "/v1, Kind=ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "rbac.authorization.k8s.io/v1, Kind=ClusterRole":
		return &rbacv1.ClusterRole{}, nil
	case "rbac.authorization.k8s.io/v1, Kind=ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}, nil
	case "rbac.authorization.k8s.io/v1, Kind=Role":
		return &rbacv1.Role{}, nil
	case "rbac.authorization.k8s.io/v1, Kind=RoleBinding":
		return &rbacv1.RoleBinding{}, nil
	case "apps/v1, Kind=DaemonSet":
		return &appsv1.DaemonSet{}, nil
	case "apps/v1, Kind=Deployment":
		return &appsv1.Deployment{}, nil
	case "apiextensions.k8s.io/v1, Kind=CustomResourceDefinition":
		return &apiextensionsv1.CustomResourceDefinition{}, nil
	}
	return nil, fmt.Errorf("%w: apiVersion %q kind %q", ErrUnknownKind, tm.APIVersion, tm.Kind)
}

// unmarshalStrict decodes a YAML document as the API server decodes a
// request in strict field validation: field names are case-sensitive, and
// an unknown or duplicated field is an error.
func unmarshalStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// ReporterAccessFiles are the manifests that give the reporter its identity
// and rights: its Namespace, ServiceAccount and RBAC.
var ReporterAccessFiles = []string{"namespace.yaml", "serviceaccount.yaml", "rbac.yaml"}

// ControllerFiles are the controller's manifests: its identity and rights
// (Namespace, ServiceAccount, RBAC), then its Deployment.
var ControllerFiles = []string{"controller.yaml", "controller-deployment.yaml"}

// ControllerAccessFiles are the manifests that give the controller its
// identity and rights, with the reporters' Namespace where it reads their
// Leases.
var ControllerAccessFiles = []string{"namespace.yaml", "controller.yaml"}

// PodCheckpointFiles define the PodCheckpoint objects: their
// CustomResourceDefinition, and the ClusterRoles that give a namespace's
// users (admin, edit, view) their access to them by aggregation.
var PodCheckpointFiles = []string{"crd-podcheckpoint.yaml", "rbac-podcheckpoint.yaml"}

// PodMigrationFiles define the PodMigration objects: their
// CustomResourceDefinition, the ClusterRoles of a namespace's users, the
// controller's rights to move pods and the reporters' to send. They are
// not in the kustomization: a migration needs the nodes' certificates
// and keys that an operator sets up, and `--pod-migrations` on the
// controller and the reporters (docs/migration.md); until then nobody is
// given a right it does not use.
var PodMigrationFiles = []string{"crd-podmigration.yaml", "rbac-podmigration.yaml"}

// PodCheckpointDefinition returns PodCheckpointFiles as one multi-document
// YAML stream.
func PodCheckpointDefinition() ([]byte, error) {
	return concat(PodCheckpointFiles)
}

// ReporterAccess returns ReporterAccessFiles as one multi-document YAML
// stream, for tests that run the reporter with exactly the rights it is
// deployed with.
func ReporterAccess() ([]byte, error) {
	return concat(ReporterAccessFiles)
}

// ControllerAccess returns ControllerAccessFiles as one multi-document YAML
// stream, for tests that run the controller with exactly the rights it is
// deployed with.
func ControllerAccess() ([]byte, error) {
	return concat(ControllerAccessFiles)
}

func concat(files []string) ([]byte, error) {
	var out []byte
	for _, f := range files {
		data, err := Manifests.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read deploy/%s: %w", f, err)
		}
		out = append(append(out, data...), "\n---\n"...)
	}
	return out, nil
}
