package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// LocateMalachid returns the malachid binary to run: flagPath when given
// (it must be an executable file), else one built from this module into
// dir/bin (the working directory must be inside the module); what it
// does is said on out.
func LocateMalachid(ctx context.Context, flagPath, dir string, out io.Writer) (string, error) {
	return Locate(ctx, "malachid", flagPath, dir, out)
}

// Locate returns the binary of the module's command ./cmd/name, as
// LocateMalachid does for malachid: flagPath (the flag --name) when given,
// else one built into dir/bin.
func Locate(ctx context.Context, name, flagPath, dir string, out io.Writer) (string, error) {
	if flagPath != "" {
		fi, err := os.Stat(flagPath)
		if err != nil {
			return "", fmt.Errorf("--%s %s: %w", name, flagPath, err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("--%s %s: not an executable file", name, flagPath)
		}
		return filepath.Abs(flagPath)
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", fmt.Errorf("no --%s given and %w", name, err)
	}
	bin := filepath.Join(dir, "bin", name)
	fmt.Fprintf(out, "building %s: go build -o %s ./cmd/%s (in %s)\n", name, bin, name, root)
	if err := Build(ctx, root, "./cmd/"+name, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// Build runs `go build -o out pkg` in the module directory root.
func Build(ctx context.Context, root, pkg, out string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", out, pkg)
	cmd.Dir = root
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s in %s: %v\n%s", pkg, root, err, strings.TrimSpace(buf.String()))
	}
	return nil
}

// ModuleRoot finds the directory of this project's go.mod at or above the
// working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/malachi-log/malachi\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the working directory is not inside the malachi module (run from the repository, or pass --malachid)")
		}
		dir = parent
	}
}

// TailFile returns the last n lines of a file, indented, for error
// messages.
func TailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	for i := range lines {
		lines[i] = "  " + lines[i]
	}
	return strings.Join(lines, "\n")
}

// BuildTemp builds each of the module's packages pkgs (such as
// "./cmd/malachid") into a new temporary directory named after prefix,
// each binary named after its package's last element, and returns the
// directory (the caller removes it; it is returned with a failed build
// too, when it was made). The working directory must be inside the module.
func BuildTemp(ctx context.Context, prefix string, pkgs ...string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	root, err := ModuleRoot()
	if err != nil {
		return dir, err
	}
	for _, pkg := range pkgs {
		if err := Build(ctx, root, pkg, filepath.Join(dir, filepath.Base(pkg))); err != nil {
			return dir, err
		}
	}
	return dir, nil
}
