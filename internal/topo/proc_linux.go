package topo

import "syscall"

// childAttr makes a redis-server die with the process that started it
// (Linux parent-death signal), so a test or harness that is killed leaves
// no server behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
