package shops

import "syscall"

// childAttr makes a child die with the harness (Linux: parent-death signal),
// so an interrupted run leaves no shop or redis-server behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
