// Package controller marks silent nodes: it is the cluster-wide half of
// nodeshim's node heartbeat, as kube-controller-manager's node lifecycle
// controller is for kubelet's.
//
// Every node's reporter renews a Lease named after the node in its own
// namespace (cluster/reporter). The controller watches those Leases and the
// Nodes through informers and, once a node's Lease has not been renewed for
// a grace period (40 s by default, kubelet's), sets each of that node's
// nodeshim conditions (NodeShim*, never kubelet's) to Unknown with reason
// ReporterStopped and the time of the last renewal in the message, through
// a strategic-merge patch of the Node's status subresource that names only
// those conditions. Recovery is the reporter's: once it renews its Lease
// again it reads the Node back and publishes its own conditions over the
// Unknown ones; the controller never writes anything but Unknown.
//
// Staleness is measured on the controller's own clock, from the moment it
// saw the Lease's renewTime change, as kube-controller-manager does with
// kubelet's Lease: a node's clock that is off cannot make its Lease look
// fresh or stale. A controller that has just started therefore waits a full
// grace period before it marks anything.
//
// Several replicas may run: they elect a leader through a Lease of their
// own (cluster/election: client-go's algorithm and Lease record on nodeshim's
// small API client, cluster/kubeapi), every replica keeps its
// informers and observations warm, and only the leader writes. A condition that is
// already Unknown keeps its lastTransitionTime, and one that is already
// marked is not written again, so a restart or a change of leader neither
// loses a mark nor flaps a condition.
package controller
