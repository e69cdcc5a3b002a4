package counters

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/rink-go/rink"
)

// A replica of a service in production: every replica runs this. Each of
// 256 tenants has a primary, which serves its writes, and a secondary in
// another zone, which follows them and takes over warm when the primary
// crashes.
func ExampleStart() {
	logger, _ := zap.NewProduction()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := rink.NewContext(ctx, cli, "counters",
		rink.WithMemberName(os.Getenv("POD_NAME")), // unique among live members
		rink.WithZone(os.Getenv("ZONE")),           // the node's topology.kubernetes.io/zone label, through the downward API
		rink.WithReplicas(2),                       // a primary and one secondary per tenant; every replica must agree
		rink.WithSessionTTL(10*time.Second),        // a crashed primary's tenants are promoted after about this long
		rink.WithRebalanceDelay(30*time.Second),    // how long a newcomer waits to inherit a leaving replica's tenants
		rink.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	node, err := Start(r, cli, Config{Prefix: "counters/", Roles: Roles("tenant", 256), Log: logger})
	if err != nil {
		log.Fatal(err)
	}

	// Writes go to the tenant's primary; a request that reaches another
	// replica is told where to go.
	http.HandleFunc("/views", func(w http.ResponseWriter, req *http.Request) {
		tenant, page := req.FormValue("tenant"), req.FormValue("page")
		u, err := node.Add(req.Context(), tenant, page, 1)
		switch {
		case errors.Is(err, ErrNotPrimary), errors.Is(err, ErrStale):
			owner, _ := r.Owner(tenant)
			http.Error(w, "ask "+owner, http.StatusMisdirectedRequest)
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, u.Value)
		}
	})
	srv := &http.Server{Addr: ":8080"}
	go srv.ListenAndServe()

	<-ctx.Done()
	_ = srv.Shutdown(context.Background())
	if err := r.Shutdown(context.Background()); err != nil { // hands the primaries over at once
		log.Print(err)
	}
	node.Close()
}
