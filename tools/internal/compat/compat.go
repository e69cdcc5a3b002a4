// Package compat builds rink's member program at a recorded baseline
// commit, for the mixed-version test (compat_test.go): members built from
// the baseline and members built from the working tree share one rink
// through a rolling upgrade and a rollback, and the history checker of
// internal/chaos judges what they did.
//
// The baseline commit is recorded in one file, compat/baseline at the
// repository root, so that each release moves it forward. The test needs the
// repository's git history to build it: a checkout without history (a
// source tarball) makes the test fail and say so, never skip.
package compat

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// BaselineFile is where the baseline commit is recorded, relative to the
// repository root.
const BaselineFile = "compat/baseline"

// ErrNoHistory reports that the baseline cannot be built because the
// checkout has no git history, or not the baseline commit.
var ErrNoHistory = errors.New("compat: no git history to build the baseline from")

// Root returns the repository root: the nearest directory at or above dir
// that holds BaselineFile.
func Root(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, BaselineFile)); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("compat: no %s at or above %s", BaselineFile, dir)
		}
	}
}

var fullHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Baseline reads the baseline commit (a full hash) recorded under root.
func Baseline(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, BaselineFile))
	if err != nil {
		return "", fmt.Errorf("compat: reading the baseline commit: %w", err)
	}
	commit := strings.TrimSpace(string(data))
	if !fullHash.MatchString(commit) {
		return "", fmt.Errorf("compat: %s holds %q, want a full 40-hex commit hash (git rev-parse <commit>)", BaselineFile, commit)
	}
	return commit, nil
}

// Export writes the tree of commit, from the git repository at root, into
// dir (created if needed). It reads the history only (git archive): it
// neither touches the working tree nor registers a worktree. It fails with
// ErrNoHistory, saying why, when git is missing, root is not a git
// checkout, or the commit is not in its history (a shallow clone).
func Export(ctx context.Context, root, commit, dir string) error {
	if _, err := exec.LookPath("git"); err != nil {
		return fmt.Errorf("%w: git is not installed, and the baseline commit %s (%s) is built from the repository's history", ErrNoHistory, commit, BaselineFile)
	}
	if out, err := git(ctx, root, "rev-parse", "--git-dir"); err != nil {
		return fmt.Errorf("%w: %s is not a git checkout (a source tarball?): the baseline commit %s (%s) is built from the repository's history; run this test in a git clone (%s)",
			ErrNoHistory, root, commit, BaselineFile, strings.TrimSpace(out))
	}
	if out, err := git(ctx, root, "cat-file", "-e", commit+"^{commit}"); err != nil {
		return fmt.Errorf("%w: commit %s (%s) is not in this clone's history (shallow clone? git fetch --unshallow) (%s)",
			ErrNoHistory, commit, BaselineFile, strings.TrimSpace(out))
	}
	cmd := exec.CommandContext(ctx, "git", "archive", "--format=tar", commit)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	xerr := untar(out, dir)
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("compat: git archive %s: %v: %s", commit, err, stderr.String())
	}
	return xerr
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// untar extracts a tar stream into dir: directories, regular files and
// symbolic links (what git archive writes).
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("compat: reading the archive: %w", err)
		}
		name := filepath.Clean(filepath.FromSlash(h.Name))
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("compat: archive entry %q leaves the directory", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, path); err != nil {
				return err
			}
		}
		// Anything else (git's pax global header carrying the commit id) is
		// not part of the tree.
	}
}

// Build runs go build for pkg (such as ./internal/chaos/worker) in the
// module at dir, writing the binary to out. It uses the go command that
// runs the tests, and the shared module and build caches.
func Build(ctx context.Context, dir, pkg, out string) error {
	goCmd := "go"
	if p, err := exec.LookPath("go"); err == nil {
		goCmd = p
	}
	cmd := exec.CommandContext(ctx, goCmd, "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("compat: go build %s in %s: %v\n%s", pkg, dir, err, msg)
	}
	return nil
}
