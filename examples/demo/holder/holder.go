// Package holder is the part of the demo that runs in each member, and the
// part to copy into a service: it joins a rink and runs a loop per role. It
// imports only rink, the etcd client and the standard library.
package holder

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/rink-go/rink"
)

// Roles is what Hold needs of a *rink.Rink.
type Roles interface {
	AwaitRole(role string) context.Context
}

// Hold calls work once for each holding of role by r, until r shuts down.
// work gets the role's context and must return once that context has ended
// (and stop acting on the role the moment it has).
//
// A holding can end right after it starts: a newer map may move the role,
// or the member may fence itself, before AwaitRole's caller has looked at
// the context. work then gets a context that has already ended, returns at
// once, and Hold waits for the role again. Only rink.ErrShutdown ends the
// loop: a loop that returned on any ended context would stop holding the
// role for good the first time it lost it at once.
func Hold(r Roles, role string, work func(ctx context.Context)) error {
	if role == "" {
		return rink.ErrInvalidRole
	}
	for {
		ctx := r.AwaitRole(role)
		if errors.Is(context.Cause(ctx), rink.ErrShutdown) {
			return nil
		}
		work(ctx)
	}
}

// Config says which roles a member holds and whom it tells.
type Config struct {
	// Rink is the name of the rink to join.
	Rink string
	// Roles are the roles this member is ready to hold.
	Roles []string
	// Acquired, if set, is called when a holding starts, with its fencing
	// token; Released when it ends, with the cause (rink.ErrRoleMoved,
	// rink.ErrFenced or rink.ErrShutdown). They are called from the roles'
	// loops, concurrently for different roles.
	Acquired func(role string, token int64)
	Released func(role string, cause error)
}

// Member is one replica: a membership of the rink and a loop per role.
type Member struct {
	r     *rink.Rink
	loops sync.WaitGroup
}

// Start joins the rink cfg.Rink on cli with opts and starts a loop per role.
func Start(cli *clientv3.Client, cfg Config, opts ...rink.Option) (*Member, error) {
	for _, role := range cfg.Roles {
		if role == "" {
			return nil, fmt.Errorf("%w: empty role name", rink.ErrInvalidRole)
		}
	}
	r, err := rink.New(cli, cfg.Rink, opts...)
	if err != nil {
		return nil, err
	}
	m := &Member{r: r}
	for _, role := range cfg.Roles {
		m.loops.Add(1)
		go func() {
			defer m.loops.Done()
			_ = Hold(r, role, func(ctx context.Context) {
				token, _ := rink.Token(ctx)
				if cfg.Acquired != nil {
					cfg.Acquired(role, token)
				}
				<-ctx.Done() // the work on the role would run here, until ctx ends
				if cfg.Released != nil {
					cfg.Released(role, context.Cause(ctx))
				}
			})
		}()
	}
	return m, nil
}

// Rink returns the member's rink, for Rank, Owner and Get.
func (m *Member) Rink() *rink.Rink { return m.r }

// Shutdown leaves the rink, which hands every role over at once, and waits
// for the roles' loops to return.
func (m *Member) Shutdown(ctx context.Context) error {
	err := m.r.Shutdown(ctx)
	m.loops.Wait()
	return err
}

// Wait waits until the rink has stopped — after Shutdown, or when its etcd
// client was closed — and every role's loop has returned.
func (m *Member) Wait() {
	<-m.r.Done()
	m.loops.Wait()
}
