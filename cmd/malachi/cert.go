package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/malachi-log/malachi/meta"
	"github.com/malachi-log/malachi/pki"
)

// certsDirEnv names the environment variable that gives --certs-dir its
// default, as COCKROACH_CERTS_DIR does for cockroach.
const certsDirEnv = "MALACHI_CERTS_DIR"

// defaultCertsDir is --certs-dir's default: $MALACHI_CERTS_DIR, else
// "certs".
func defaultCertsDir() string {
	if d := os.Getenv(certsDirEnv); d != "" {
		return d
	}
	return "certs"
}

const certUsage = `usage:
  malachi cert create-ca      [--certs-dir DIR] [--lifetime 87600h]
  malachi cert create-broker  ID --host H [--host H ...] [--certs-dir DIR] [--ca-cert F] [--ca-key F] [--lifetime 43800h]
  malachi cert create-client  NAME --role operator|viewer|client [--certs-dir DIR] [--ca-cert F] [--ca-key F] [--lifetime 43800h]
  malachi cert list           [--certs-dir DIR]

--certs-dir defaults to $MALACHI_CERTS_DIR, else ./certs. Keys are written
0600; nothing is ever overwritten. The CA key stays where certificates are
made: copy ca.crt and a broker's pair to its host, not ca.key.
`

// runCert is `malachi cert SUBCOMMAND`.
func runCert(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, certUsage)
		return usageErr("cert: a subcommand is required")
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "create-ca":
		return certCreateCA(rest, stdout, stderr)
	case "create-broker":
		return certCreateLeaf(sub, rest, stdout, stderr)
	case "create-client":
		return certCreateLeaf(sub, rest, stdout, stderr)
	case "list":
		return certList(rest, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, certUsage)
		return nil
	}
	fmt.Fprint(stderr, certUsage)
	return usageErr("cert: unknown subcommand %q", sub)
}

func certFlags(name string, stderr io.Writer) (*flag.FlagSet, *pki.Options) {
	fs := flag.NewFlagSet("cert "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &pki.Options{}
	fs.StringVar(&o.Dir, "certs-dir", defaultCertsDir(), "certs directory written to (env "+certsDirEnv+")")
	fs.DurationVar(&o.Lifetime, "lifetime", 0, "validity from now (default: CA 87600h, others 43800h)")
	return fs, o
}

func certCreateCA(args []string, stdout, stderr io.Writer) error {
	fs, o := certFlags("create-ca", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := pki.CreateCA(*o); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s (0600)\n", filepath.Join(o.Dir, pki.CACert), filepath.Join(o.Dir, pki.CAKey))
	return nil
}

// hostsFlag collects repeated --host values.
type hostsFlag []string

func (h *hostsFlag) String() string     { return strings.Join(*h, ",") }
func (h *hostsFlag) Set(v string) error { *h = append(*h, v); return nil }

// certCreateLeaf is create-broker ID and create-client NAME: the one
// positional argument comes first, the flags after it.
func certCreateLeaf(sub string, args []string, stdout, stderr io.Writer) error {
	fs, o := certFlags(sub, stderr)
	fs.StringVar(&o.CACert, "ca-cert", "", "the CA certificate (default: DIR/ca.crt)")
	fs.StringVar(&o.CAKey, "ca-key", "", "the CA key (default: DIR/ca.key)")
	var hosts hostsFlag
	var role string
	what := "NAME"
	if sub == "create-broker" {
		what = "ID"
		fs.Var(&hosts, "host", "a host name or address peers dial (repeat for each)")
	} else {
		fs.StringVar(&role, "role", "", "operator (admin changes, Kafka produce and consume), viewer (reads, Kafka consume) or client (Kafka produce and consume only)")
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fs.Usage()
			return errHelp
		}
		return usageErr("cert %s: the %s comes first", sub, what)
	}
	arg := args[0]
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	var files string
	if sub == "create-broker" {
		n, err := strconv.ParseUint(arg, 10, 32)
		if err != nil || n == 0 {
			return usageErr("cert create-broker: broker id %q: want a positive integer", arg)
		}
		if err := pki.CreateBroker(*o, meta.BrokerID(n), hosts); err != nil {
			return err
		}
		files = pki.BrokerCert + " and " + pki.BrokerKey
	} else {
		r, err := pki.ParseRole(role)
		if err != nil {
			return usageErr("cert create-client: --role: %v", err)
		}
		if err := pki.CreateClient(*o, arg, r); err != nil {
			return err
		}
		files = pki.ClientCert(arg) + " and " + pki.ClientKey(arg)
	}
	fmt.Fprintf(stdout, "wrote %s in %s (key 0600)\n", files, o.Dir)
	return nil
}

func certList(args []string, stdout, stderr io.Writer) error {
	fs, o := certFlags("list", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ents, err := os.ReadDir(o.Dir)
	if err != nil {
		return fmt.Errorf("cert list: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".crt") {
			continue
		}
		c, err := pki.ReadCertificate(filepath.Join(o.Dir, e.Name()))
		if err != nil {
			fmt.Fprintf(stdout, "%-24s %v\n", e.Name(), err)
			continue
		}
		who := "CA"
		if id, err := pki.IdentityOf(c); err == nil {
			who = id.String()
		}
		left := time.Until(c.NotAfter).Round(time.Hour)
		fmt.Fprintf(stdout, "%-24s %-22s expires %s (in %v)\n", e.Name(), who, c.NotAfter.UTC().Format(time.RFC3339), left)
	}
	return nil
}
