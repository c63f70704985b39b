package plugin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// AuthHeader carries a request's signature:
//
//	Malachi-Auth: v1 <unix-millis> <hex HMAC-SHA256>
//
// The MAC covers "v1\n" + method + "\n" + path + "\n" + millis + "\n" +
// hex(SHA-256(body)), keyed with the cluster secret.
const AuthHeader = "Malachi-Auth"

// AuthWindow is how far a signature's timestamp may be from the server's
// clock. A request replayed inside the window is accepted; every control RPC
// is idempotent, so a replay changes nothing a first delivery did not.
const AuthWindow = time.Minute

// ErrUnauthenticated is returned to (and by) a caller whose request carries
// no valid signature.
var ErrUnauthenticated = errors.New("plugin: unauthenticated")

func mac(secret []byte, method, path string, millis int64, body []byte) string {
	sum := sha256.Sum256(body)
	h := hmac.New(sha256.New, secret)
	fmt.Fprintf(h, "v1\n%s\n%s\n%d\n%x", method, path, millis, sum)
	return hex.EncodeToString(h.Sum(nil))
}

// sign sets the AuthHeader of r, whose body is body.
func sign(r *http.Request, secret []byte, now time.Time, body []byte) {
	ms := now.UnixMilli()
	r.Header.Set(AuthHeader, "v1 "+strconv.FormatInt(ms, 10)+" "+mac(secret, r.Method, r.URL.Path, ms, body))
}

// verify checks the AuthHeader of r against body. It returns an error
// wrapping ErrUnauthenticated that says what was wrong, never the secret.
func verify(r *http.Request, secret []byte, now time.Time, body []byte) error {
	f := strings.Fields(r.Header.Get(AuthHeader))
	if len(f) != 3 || f[0] != "v1" {
		return fmt.Errorf("%w: missing or malformed %s header", ErrUnauthenticated, AuthHeader)
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q", ErrUnauthenticated, f[1])
	}
	skew := now.Sub(time.UnixMilli(ms))
	if skew > AuthWindow || skew < -AuthWindow {
		return fmt.Errorf("%w: timestamp %v off by %v, more than %v", ErrUnauthenticated, time.UnixMilli(ms).UTC(), skew, AuthWindow)
	}
	want := mac(secret, r.Method, r.URL.Path, ms, body)
	if !hmac.Equal([]byte(want), []byte(f[2])) {
		return fmt.Errorf("%w: bad signature (is the cluster secret the same on every broker?)", ErrUnauthenticated)
	}
	return nil
}
