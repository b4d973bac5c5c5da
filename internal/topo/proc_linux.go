package topo

import "syscall"

// childAttr makes a redis-server die with the process that started it
// (Linux parent-death signal), so a test or harness that is killed leaves
// no server behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// userAttr is childAttr for a process started as user uid (0: as we are).
// The parent-death signal is set after the change of user, so it holds.
func userAttr(uid, gid uint32) *syscall.SysProcAttr {
	a := childAttr()
	if uid != 0 {
		a.Credential = &syscall.Credential{Uid: uid, Gid: gid}
	}
	return a
}
