package bpf

import "golang.org/x/sys/unix"

// errESRCH is what reading /proc/PID/stat returns for a process that exits
// during the read.
const errESRCH = unix.ESRCH
