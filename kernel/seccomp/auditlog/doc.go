// Package auditlog reads the kernel's seccomp audit records
// (type=1326, AUDIT_SECCOMP) from the kernel log, /dev/kmsg: one for each
// syscall a filter answered with an action that actions_logged lists,
// SCMP_ACT_LOG among them (complain mode). With no audit daemon
// attached, kauditd prints each record to the kernel log
// (kernel/audit.c, kauditd_printk_skb) as
//
//	audit: type=1326 audit(1795836419.010:232): auid=4294967295 uid=0 gid=0 ses=4294967295 pid=6430 comm="mkdir" exe="/usr/bin/mkdir" sig=0 arch=c000003e syscall=83 compat=0 ip=0x7fcea6fdaf37 code=0x7ffc0000
//
// kauditd also sends every record, whether or not an audit daemon runs, to
// the audit netlink socket's read-only multicast group
// (AUDIT_NLGRP_READLOG), without the kernel log's rate limit (10 records
// every 5 s). Parse reads one line; a Follower reads the netlink group
// (Netlink) or /dev/kmsg from its end and sends the records. A node with
// auditd gets the records in its log instead of the kernel log.
package auditlog
