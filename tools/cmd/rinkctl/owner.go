package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func ownerCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "owner NAME ROLE...",
		Short: "Show which member owns each role, and with replicas which members hold it as secondaries",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, role := range args[1:] {
				if role == "" {
					return usage("an empty role name")
				}
			}
			ob, _, closeAll, err := g.observe(cmd.Context(), args[0], false)
			if err != nil {
				return err
			}
			defer closeAll()
			s := ob.State()
			// With replicas, Owners lists every member holding the
			// role, its owner (the primary) first; a rink of one
			// replica prints, and encodes, as it did before them.
			type owned struct {
				Role   string   `json:"role"`
				Owner  string   `json:"owner"`
				Owners []string `json:"owners,omitempty"`
			}
			replicated := s.Replicas > 1
			var list []owned
			for _, role := range args[1:] {
				o, _ := s.Owner(role)
				e := owned{Role: role, Owner: o}
				if replicated {
					e.Owners, _ = s.Owners(role)
				}
				list = append(list, e)
			}
			if g.output == "json" {
				return g.json(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			if !replicated {
				fmt.Fprintln(tw, "ROLE\tOWNER")
				for _, o := range list {
					fmt.Fprintf(tw, "%s\t%s\n", o.Role, orNone(o.Owner))
				}
				return tw.Flush()
			}
			fmt.Fprintln(tw, "ROLE\tOWNER\tSECONDARIES")
			for _, o := range list {
				secondaries := "-"
				if len(o.Owners) > 1 {
					secondaries = strings.Join(o.Owners[1:], ",") // the one that has held it longest first
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", o.Role, orNone(o.Owner), secondaries)
			}
			return tw.Flush()
		},
	}
}
