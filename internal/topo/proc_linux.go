package topo

import (
	"os"
	"syscall"
)

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

// ownGroup puts a process in a process group of its own, so killGroup
// reaches the helpers it starts (a Galera node's state-transfer scripts),
// which a parent-death signal does not: left behind, they keep their files
// and ports, and what they inherited, after the node is gone.
func ownGroup(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	if a == nil {
		a = &syscall.SysProcAttr{}
	}
	a.Setpgid = true
	return a
}

// killGroup sends SIGKILL to p's process group (see ownGroup).
func killGroup(p *os.Process) error {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		return p.Signal(syscall.SIGKILL)
	}
	return nil
}
