package embedetcd

import (
	"fmt"
	"io"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Connect returns a client of the etcd at endpoints (comma-separated). With
// no endpoints it starts an embedded etcd in a temporary directory first and
// says on out where it listens, so that other copies of an example can join
// it with -endpoints. The returned function closes everything it opened.
func Connect(endpoints string, out io.Writer) (*clientv3.Client, func(), error) {
	var srv *Server
	if strings.TrimSpace(endpoints) == "" {
		var err error
		if srv, err = Start(Options{}); err != nil {
			return nil, nil, fmt.Errorf("starting embedded etcd: %w", err)
		}
		endpoints = srv.Endpoint()
		fmt.Fprintf(out, "embedded etcd at %s\n", endpoints)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   strings.Split(endpoints, ","),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, nil, err
	}
	return cli, func() {
		cli.Close()
		if srv != nil {
			srv.Close()
		}
	}, nil
}
