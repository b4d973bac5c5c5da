package procstat

// A process's memory and the kernel's listen queues.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// ListenOverflows is the kernel's count of connects dropped on a full
// listen queue (TcpExt ListenOverflows in /proc/net/netstat); -1: unknown.
func ListenOverflows() int64 {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return -1
	}
	var names []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "TcpExt:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "ListenOverflows" && i < len(f) {
				n, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil {
					return -1
				}
				return n
			}
		}
	}
	return -1
}

// SoMaxConn is net.core.somaxconn, the bound of a listen queue; 0: unknown.
func SoMaxConn() int64 {
	b, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// Status reads the kB fields of /proc/<pid>/status, in MB.
func Status(pid int) (map[string]float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("peak RSS needs /proc (Linux): %w", err)
	}
	defer f.Close()
	return parseStatus(f), nil
}

func parseStatus(r io.Reader) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		f := strings.Fields(rest)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			out[name] = v / 1024
		}
	}
	return out
}
