package main

import (
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/malachi-log/malachi/admin"
	"github.com/malachi-log/malachi/pki"
	"github.com/malachi-log/malachi/rpc"
)

// connFlags are the flags of every command that talks to a broker: who
// the CLI is to the cluster.
type connFlags struct {
	certsDir string
	user     string
	insecure bool
	fs       *flag.FlagSet
}

func addConnFlags(fs *flag.FlagSet) *connFlags {
	f := &connFlags{fs: fs}
	fs.StringVar(&f.certsDir, "certs-dir", defaultCertsDir(), "directory of ca.crt and client.NAME.crt/.key (env "+certsDirEnv+")")
	fs.StringVar(&f.user, "user", "", "client certificate NAME to present (client.NAME.crt; default: the only one in --certs-dir)")
	fs.BoolVar(&f.insecure, "insecure", false, "plaintext, no certificates: for a cluster run with insecure = true (loopback only)")
	return f
}

// client builds the RPC client the flags describe, each call bounded by
// timeout. Call it after the flags are parsed.
func (f *connFlags) client(cmd string, timeout time.Duration) (*rpc.Client, error) {
	if f.insecure {
		var given []string
		f.fs.Visit(func(fl *flag.Flag) {
			if fl.Name == "certs-dir" || fl.Name == "user" {
				given = append(given, "--"+fl.Name)
			}
		})
		if len(given) > 0 {
			return nil, usageErr("%s: --insecure uses no certificates: drop %s", cmd, given[0])
		}
		return rpc.NewClient(nil, admin.Codes, timeout), nil
	}
	certs, err := pki.LoadClient(f.certsDir, f.user)
	if err != nil {
		return nil, fmt.Errorf("%s: --certs-dir %s: %w (a cluster in insecure mode takes --insecure instead)", cmd, f.certsDir, err)
	}
	return rpc.NewClient(certs, admin.Codes, timeout), nil
}

// validateAddr checks a host:port flag value before anything is sent.
func validateAddr(flagName, addr string) error {
	if addr == "" {
		return fmt.Errorf("--%s is required (host:port of a broker's admin API)", flagName)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s %q: want host:port: %v", flagName, addr, err)
	}
	if host == "" || port == "" {
		return fmt.Errorf("--%s %q: want host:port with both parts", flagName, addr)
	}
	return nil
}
