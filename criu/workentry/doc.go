// Package workentry owns the work entries that a checkpoint or a restore
// makes in a checkpoint directory while it runs (CRIU's work directory,
// as large as the dumped memory, and the temp archive before it is
// published): their names, whether their maker may still be using them,
// and the target locks that the CLI and nodeshim serve share.
//
// criu makes and sweeps the entries; the retention policy
// (shim/checkpoint/retention) lists them with their sizes and removes the
// left-over ones. Both judge an entry the same way, here: a pid alone
// cannot say whether its maker lives (the pid may belong to another
// process now, or to another pid namespace than the judge's), so an entry
// is in use while a target lock is held by a process of its pid, or
// while a process of its pid exists that started before the entry was
// made.
package workentry
