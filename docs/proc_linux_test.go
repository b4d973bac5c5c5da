package docs

import "syscall"

// dieWithTest makes a child process get SIGKILL if the test process dies
// first (a killed go test must not leave a shop running).
func dieWithTest(a *syscall.SysProcAttr) *syscall.SysProcAttr {
	a.Pdeathsig = syscall.SIGKILL
	return a
}
