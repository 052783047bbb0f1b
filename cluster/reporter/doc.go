// Package reporter publishes the shim's node status to the Kubernetes API
// server: the unprivileged half of nodeshim, in the manner of kubelet's node
// status and lease heartbeat and of node-problem-detector's exporter.
//
// It reads the shim's status document over the node API socket and keeps
// the Node in step with it:
//
//   - nodeshim's conditions on the Node's status under names of their own
//     (NodeShimReady, NodeShim<Type>), never kubelet's Ready or pressure
//     types, through a strategic-merge patch of the status subresource that
//     names only those types, so that every other condition is untouched;
//     lastTransitionTime moves only when a status changes;
//   - the patch is sent when something changed and at least every
//     ResyncPeriod (5 minutes) otherwise, as a heartbeat;
//   - a Lease per node, renewed every RenewInterval (10 s) with jitter and
//     retried with exponential backoff (200 ms up to 7 s) on failure;
//   - an Event per condition transition, through a token bucket;
//   - annotations with the digest of the published status, the digest of
//     the capability report's summary when the shim serves one, and the
//     reporter's version.
//
// When the shim cannot be read, NodeShimReady turns False with reason
// ShimUnreachable and every other nodeshim condition Unknown, so that no
// stale True stays on the Node. When the API server cannot be reached the
// reporter keeps the latest state and retries until it converges.
//
// The nodeshim controller (cluster/controller) marks the conditions Unknown
// with ReasonReporterStopped when the Lease goes stale; recovery is the
// reporter's. It reads the Node when it starts, and reads it back after a
// gap in its heartbeat (its first renewal, a failed one, or one more than
// two intervals late) and once more an interval later, and its next patch
// replaces the marks with its own conditions and new transition times.
package reporter
