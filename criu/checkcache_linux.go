package criu

import (
	"os"
	"syscall"
)

// fillIdentity adds the inode, device and change time of fi to id.
func fillIdentity(id *binaryIdentity, fi os.FileInfo) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.Inode = st.Ino
		id.Device = st.Dev
		id.ChTime = st.Ctim.Nano()
	}
}
