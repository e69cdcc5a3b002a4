package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rink-go/rink"
)

func watchCmd(g *globals) *cobra.Command {
	var maxChanges int
	cmd := &cobra.Command{
		Use:   "watch NAME",
		Short: "Print a line for every change of a rink: joins, promotions, leaves, leader, slots moved",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ob, closeAll, err := g.observe(cmd.Context(), args[0], true)
			if err != nil {
				return err
			}
			defer closeAll()
			w := cmd.OutOrStdout()
			prev := ob.State()
			print := func(s rink.State, what []rink.Change) error {
				if g.output == "json" {
					return json.NewEncoder(w).Encode(struct {
						Time    time.Time     `json:"time"`
						Version int64         `json:"version"`
						Changes []rink.Change `json:"changes"`
					}{time.Now().UTC(), s.Version, what})
				}
				words := make([]string, len(what))
				for i, c := range what {
					words[i] = c.String()
				}
				_, err := fmt.Fprintf(w, "%s v%d %s\n", time.Now().UTC().Format("15:04:05.000"), s.Version, strings.Join(words, "; "))
				return err
			}
			if g.output == "table" {
				fmt.Fprintf(w, "%s v%d watching: %d ranked, %d waiting, leader %s\n", time.Now().UTC().Format("15:04:05.000"),
					prev.Version, len(prev.Members), len(prev.Waiting)+len(prev.Joining), orNone(prev.Leader))
			}
			for n := 0; maxChanges <= 0 || n < maxChanges; {
				select {
				case <-prev.Changed():
				case <-cmd.Context().Done():
					return nil
				case <-ob.Done():
					return nil
				}
				next := ob.State()
				if what := rink.Diff(prev, next); len(what) > 0 {
					if err := print(next, what); err != nil {
						return err
					}
					n++
				}
				prev = next
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&maxChanges, "max-changes", 0, "exit after this many changes (0: until interrupted)")
	return cmd
}
