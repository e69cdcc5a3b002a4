package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"

	"github.com/rink-go/rink/internal/embedetcd"
)

// defaultEtcdAddr is where 'rinkctl etcd' serves clients when it is free:
// etcd's own default, which every etcd client (and rinkctl) tries first.
const defaultEtcdAddr = "127.0.0.1:2379"

// defaultDataDir is where 'rinkctl etcd' keeps its data unless told: a
// directory under the user's cache directory (~/.cache/rink/etcd on Linux,
// ~/Library/Caches/rink/etcd on macOS), so that a rink tried out survives
// a restart and nothing is written into the working tree; or
// ./rink-etcd.data when there is no cache directory.
func defaultDataDir() string {
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "rink", "etcd")
	}
	return "rink-etcd.data"
}

func etcdCmd(g *globals) *cobra.Command {
	var dataDir, listen string
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Run a single-node etcd to try rink with, until interrupted",
		Long: `etcd runs a single-node etcd inside rinkctl, for trying rink on one machine:
it serves clients on --listen (default 127.0.0.1:2379, or a free loopback
port when that one is taken), keeps its data in --data-dir (default
` + defaultDataDir() + `), prints its endpoint, and runs until
interrupted (Ctrl-C, SIGTERM), when it stops cleanly. The data stays: the
next run finds the rinks where they were (rinkctl rm retires one). It is no
production etcd: one node, plain HTTP on loopback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			addr := listen
			if !cmd.Flags().Changed("listen") && !free(addr) {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					return err
				}
				addr = l.Addr().String()
				l.Close()
				fmt.Fprintf(out, "%s is taken (another etcd?): serving at %s instead\n", listen, addr)
			}
			if h, p, err := net.SplitHostPort(addr); err != nil || p == "" {
				return usage("--listen %q: want host:port", addr)
			} else if p == "0" {
				// A free port, chosen now (etcd listens on what it is told).
				l, err := net.Listen("tcp", net.JoinHostPort(h, "0"))
				if err != nil {
					return err
				}
				addr = l.Addr().String()
				l.Close()
			}
			if err := os.MkdirAll(dataDir, 0o700); err != nil {
				return fmt.Errorf("the data directory: %w", err)
			}
			// etcd waits for the locks of a directory in use: say so
			// instead.
			lock, err := fileutil.TryLockFile(filepath.Join(dataDir, "rinkctl.lock"), os.O_WRONLY|os.O_CREATE, 0o600)
			if err != nil {
				if errors.Is(err, fileutil.ErrLocked) {
					return fmt.Errorf("%s is in use by another rinkctl etcd: stop it, or give another --data-dir", dataDir)
				}
				return fmt.Errorf("the data directory: %w", err)
			}
			defer lock.Close()
			srv, err := embedetcd.Start(embedetcd.Options{Dir: dataDir, ClientAddr: addr})
			if err != nil {
				return fmt.Errorf("starting etcd at %s with data in %s: %w", addr, dataDir, err)
			}
			ep := srv.Endpoint()
			fmt.Fprintf(out, "etcd serving at %s, data in %s; Ctrl-C stops it\n", ep, dataDir)
			fmt.Fprintf(out, "endpoint: %s\n", ep)
			if ep != defaultEtcdAddr {
				fmt.Fprintf(out, "for rinkctl and etcdctl in another shell:\nexport ETCDCTL_ENDPOINTS=%s\n", ep)
			}
			select {
			case <-cmd.Context().Done():
			case <-srv.Stopped():
				err := srv.Err()
				srv.Close()
				return fmt.Errorf("etcd stopped by itself (its data stays in %s): %v", dataDir, err)
			}
			srv.Close()
			fmt.Fprintf(out, "etcd stopped; its data stays in %s\n", dataDir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "where etcd keeps its data")
	cmd.Flags().StringVar(&listen, "listen", defaultEtcdAddr, "host:port to serve clients on (port 0: a free one)")
	return cmd
}

// free reports whether addr can be listened on now.
func free(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		var op *net.OpError
		return !errors.As(err, &op) // (a malformed address is reported later)
	}
	l.Close()
	return true
}
