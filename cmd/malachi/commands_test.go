package main

import (
	"strings"
	"testing"
)

func TestCommandFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status"}, 2, "--admin is required"},
		{[]string{"status", "--admin", "localhost"}, 2, `--admin "localhost": want host:port`},
		{[]string{"plan", "--admin", ":"}, 2, "want host:port with both parts"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "0", "--records", "1", "--size", "1"}, 2, "--segments 0"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "1", "--records", "1"}, 2, "--size is required"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "1", "--records", "1", "--size", "1", "--prefix", "a/b"}, 2, `--prefix "a/b"`},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{nil, 2, "usage:"},
		{[]string{"status", "--admin", "127.0.0.1:1", "--insecure"}, 1, "broker unreachable: broker 127.0.0.1:1: GET /v1/health"},
		{[]string{"load", "--admin", "127.0.0.1:1", "--segments", "1", "--records", "1", "--size", "4KiB", "--insecure"}, 1, "broker unreachable: broker 127.0.0.1:1: POST /v1/load"},
		{[]string{"status", "--admin", "127.0.0.1:1", "--certs-dir", "/nonexistent"}, 1, "--certs-dir /nonexistent: pki: certs directory"},
		{[]string{"demo"}, 2, `unknown command "demo"`}, // the showcase is testbed/cmd/malachi-demo
	} {
		var out, errb strings.Builder
		code := run(tc.args, &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("malachi %q: exit %d, stderr %q; want exit %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
