package v1alpha1

// The node labels by which nodeshim publishes a node's checkpoint and
// restore readiness. The reporter of each node writes them from its shim's
// capability report (and the runtime handlers kubelet reports), keeps them
// current and removes those that no longer hold; no other label of the
// Node is ever touched. A PodMigration's target is chosen, and refused,
// by them.
const (
	// LabelPrefix starts every label of this set; the reporter owns every
	// label under it, and removes one of them that no longer holds.
	LabelPrefix = "checkpoint.nodeshim.io/"
	// LabelCRIU is "true" when `criu check` passes on the node (a dump
	// and a restore can run), "false" when it fails or no criu is found.
	LabelCRIU = LabelPrefix + "criu"
	// LabelCRIUVersion is the node's CRIU version, e.g. "4.1.1".
	LabelCRIUVersion = LabelPrefix + "criu-version"
	// LabelLazyPages is "true" when userfaultfd(2) works and CRIU can
	// serve pages lazily (criu check --feature uffd-noncoop): a restore
	// with lazy pages (post-copy) can run there.
	LabelLazyPages = LabelPrefix + "lazy-pages"
	// LabelPreCopy is "true" when the kernel tracks dirty memory (criu
	// check --feature mem_dirty_track): pre-dump rounds (pre-copy) can
	// run there.
	LabelPreCopy = LabelPrefix + "pre-copy"
	// LabelRestoreRuntimeClass is "true" when the node's runtime has the
	// handler of the restoring RuntimeClass (kubelet's
	// status.runtimeHandlers lists it): a Pod can be restored there.
	LabelRestoreRuntimeClass = LabelPrefix + "restore-runtimeclass"
	// LabelArch is the node's CPU architecture as kubernetes.io/arch
	// names it: a checkpoint restores only on the architecture it was
	// taken on.
	LabelArch = LabelPrefix + "arch"
	// LabelTransferPort is the port of the node's shim TLS listener when
	// it receives pod checkpoints from other nodes' shims
	// (checkpoint.transfer.enabled): a sender reaches it at the Node's
	// InternalIP.
	LabelTransferPort = LabelPrefix + "transfer-port"
	// LabelTransferRecipient is the age recipient (age1..., 62
	// characters) of the node's first identity: a pod checkpoint sent
	// there is encrypted to it, and only the sender's configured
	// recipients are accepted for it.
	LabelTransferRecipient = LabelPrefix + "transfer-recipient"
)

// LabelTrue is the value of a boolean capability label that holds.
const LabelTrue = "true"
