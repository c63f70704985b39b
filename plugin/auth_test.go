package plugin

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAuthSignVerify(t *testing.T) {
	secret := []byte("0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"index":7}`)
	r := httptest.NewRequest("POST", "/rpc/probe", nil)
	sign(r, secret, now, body)
	if err := verify(r, secret, now.Add(time.Second), body); err != nil {
		t.Fatalf("verify: %v", err)
	}
	for _, tc := range []struct {
		name string
		mod  func() error
		want string
	}{
		{"other body", func() error { return verify(r, secret, now, []byte(`{"index":8}`)) }, "bad signature"},
		{"other secret", func() error { return verify(r, []byte("fedcba9876543210"), now, body) }, "bad signature"},
		{"stale", func() error { return verify(r, secret, now.Add(2*AuthWindow), body) }, "off by"},
		{"other path", func() error {
			r2 := httptest.NewRequest("POST", "/rpc/delete", nil)
			r2.Header.Set(AuthHeader, r.Header.Get(AuthHeader))
			return verify(r2, secret, now, body)
		}, "bad signature"},
		{"missing", func() error { return verify(httptest.NewRequest("POST", "/rpc/probe", nil), secret, now, body) }, "missing"},
	} {
		err := tc.mod()
		if !errors.Is(err, ErrUnauthenticated) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrUnauthenticated containing %q", tc.name, err, tc.want)
		}
	}
}
