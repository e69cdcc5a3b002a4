package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rink-go/rink"
)

// statusJSON is the JSON form of a rink's state.
type statusJSON struct {
	Rink     string        `json:"rink"`
	Version  int64         `json:"version"`
	Lineage  int64         `json:"lineage"`
	Revision int64         `json:"revision"`
	Leader   string        `json:"leader"`
	Slots    int           `json:"slots"`
	Replicas int           `json:"replicas,omitempty"` // members holding each slot (rink.WithReplicas), left out when 1
	Protocol int           `json:"protocol"`
	ByLoad   bool          `json:"byLoad"`
	Members  []memberJSON  `json:"members"`
	Waiting  []waitingJSON `json:"waiting"`
	Joining  []string      `json:"joining"`
	MapError string        `json:"mapError,omitempty"`
	// Settled: the rink is at rest (see rink.State.Settled); Announced,
	// LoadRound, Imbalance and Tolerance say what moves are planned.
	Settled   bool    `json:"settled"`
	Announced int     `json:"announced"`
	LoadRound bool    `json:"loadRound"`
	Imbalance float64 `json:"imbalance,omitempty"`
	Tolerance float64 `json:"tolerance,omitempty"`
}

type memberJSON struct {
	Name  string  `json:"name"`
	Index int     `json:"index"`
	Slots int     `json:"slots"`
	Share float64 `json:"share"`
	Ack   int64   `json:"ack"`
	Live  bool    `json:"live"`
	// Protocols the member speaks (empty when it is gone).
	Protocols []int `json:"protocols"`
	// Capacity is the member's capacity (0 when it is gone).
	Capacity float64 `json:"capacity"`
	// Load is the member's reported load rate (units per second) and
	// Roles the roles it awaits in its slots.
	Load  float64 `json:"load"`
	Roles int     `json:"roles"`
	// Zone is the member's failure domain (rink.WithZone), left out when
	// it names none. Secondaries counts the slots it holds as a secondary
	// (rink.WithReplicas; Slots and Share count those it owns, as
	// primary), left out when there are none.
	Zone        string `json:"zone,omitempty"`
	Secondaries int    `json:"secondaries,omitempty"`
}

type waitingJSON struct {
	Name      string    `json:"name"`
	Since     time.Time `json:"since"`
	Protocols []int     `json:"protocols"`
	Capacity  float64   `json:"capacity"`
	Zone      string    `json:"zone,omitempty"` // (rink.WithZone)
}

func toJSON(s rink.State) statusJSON {
	j := statusJSON{Rink: s.Rink, Version: s.Version, Lineage: s.Lineage, Revision: s.Revision, Leader: s.Leader, Slots: s.Slots, Protocol: s.Protocol, ByLoad: s.ByLoad, MapError: s.MapError,
		Members: []memberJSON{}, Waiting: []waitingJSON{}, Joining: append([]string{}, s.Joining...),
		Settled: s.Settled, Announced: s.Announced, LoadRound: s.LoadRound, Imbalance: s.Imbalance, Tolerance: s.Tolerance}
	if s.Replicas > 1 {
		j.Replicas = s.Replicas
	}
	for _, m := range s.Members {
		j.Members = append(j.Members, memberJSON{Name: m.Name, Index: m.Index, Zone: m.Zone, Slots: m.Slots, Secondaries: m.Secondaries,
			Share: float64(m.Slots) / float64(max(s.Slots, 1)), Ack: m.Ack, Live: m.Live, Protocols: append([]int{}, m.Protocols...),
			Capacity: m.Capacity, Load: m.Load, Roles: m.Roles})
	}
	for _, w := range s.Waiting {
		j.Waiting = append(j.Waiting, waitingJSON{Name: w.Name, Zone: w.Zone, Since: w.Since, Protocols: append([]int{}, w.Protocols...), Capacity: w.Capacity})
	}
	return j
}

func statusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status NAME",
		Short: "Show a rink's members, indexes, waiting members, leader, version and slot shares",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ob, _, closeAll, err := g.observe(cmd.Context(), args[0], false)
			if err != nil {
				return err
			}
			defer closeAll()
			s := ob.State()
			if g.output == "json" {
				return g.json(cmd.OutOrStdout(), toJSON(s))
			}
			return printStatus(cmd.OutOrStdout(), s)
		},
	}
}

// printStatus writes a rink's state as the status command's table. A rink
// of more than one replica per slot says so in its first line, and its
// table has a column of each member's secondaries (SLOTS and SHARE count
// the slots it owns, as primary); a ZONE column appears when the rink has
// replicas or any member names a zone. A rink of one replica with no
// zones prints as it did before replicas, so that scripts reading the
// table are not broken by a release that adds them.
func printStatus(w io.Writer, s rink.State) error {
	balance := "by count"
	if s.ByLoad {
		balance = "by load"
	}
	replicated := s.Replicas > 1
	slots := fmt.Sprintf("%d slots", s.Slots)
	if replicated {
		slots += fmt.Sprintf(" (%d replicas each)", s.Replicas)
	}
	fmt.Fprintf(w, "rink %s: version %d, protocol %d, leader %s, %d ranked, %d waiting, %s balanced %s\n",
		s.Rink, s.Version, s.Protocol, orNone(s.Leader), len(s.Members), len(s.Waiting)+len(s.Joining), slots, balance)
	fmt.Fprintln(w, settledLine(s))
	if s.MapError != "" {
		fmt.Fprintf(w, "THE MAP IN ETCD CANNOT BE USED (%s): members hold no roles; below is the last usable map\n", s.MapError)
	}
	zoned := replicated
	for _, m := range s.Members {
		zoned = zoned || m.Zone != ""
	}
	for _, wt := range s.Waiting {
		zoned = zoned || wt.Zone != ""
	}
	// cells returns a row's cells, the replicas' columns (zone after the
	// member, secondaries after its slots) only when the rink shows them.
	cells := func(index, name, zone, slots, secondaries string, rest ...string) string {
		row := []string{index, name}
		if zoned {
			row = append(row, zone)
		}
		row = append(row, slots)
		if replicated {
			row = append(row, secondaries)
		}
		return strings.Join(append(row, rest...), "\t") + "\n"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, cells("INDEX", "MEMBER", "ZONE", "SLOTS", "SECONDARIES", "SHARE", "CAPACITY", "LOAD/S", "ROLES", "ACK", "PROTOCOLS", "STATE"))
	for _, m := range s.Members {
		state := "live"
		switch {
		case !m.Live:
			state = "gone (being replaced)"
		case m.Ack != s.Version:
			state = fmt.Sprintf("live, applying (ack %d)", m.Ack)
		}
		if m.Name == s.Leader {
			state += ", leader"
		}
		fmt.Fprint(tw, cells(strconv.Itoa(m.Index), m.Name, orDash(m.Zone), strconv.Itoa(m.Slots), strconv.Itoa(m.Secondaries),
			fmt.Sprintf("%.1f%%", 100*float64(m.Slots)/float64(max(s.Slots, 1))), capacity(m.Capacity), strconv.FormatFloat(m.Load, 'g', 4, 64),
			strconv.Itoa(m.Roles), strconv.FormatInt(m.Ack, 10), protocols(m.Protocols), state))
	}
	for _, wt := range s.Waiting {
		fmt.Fprint(tw, cells("-", wt.Name, orDash(wt.Zone), "0", "0", "0.0%", capacity(wt.Capacity), "-", "-", "-", protocols(wt.Protocols),
			"waiting since "+wt.Since.UTC().Format(time.RFC3339)))
	}
	for _, name := range s.Joining {
		fmt.Fprint(tw, cells("-", name, "-", "0", "0", "0.0%", "-", "-", "-", "-", "-", "joining"))
	}
	return tw.Flush()
}

// settledLine says whether the rink is at rest, and if not, what moves
// are planned or pending; while the leader balances by load, it says how
// the load's imbalance stands against the tolerance, and why a rink at
// rest above the tolerance does not move.
func settledLine(s rink.State) string {
	if live, all := liveMembers(s); live == 0 {
		if all == 0 {
			return "settled: no members (nobody is ranked, waiting or joining: nothing holds a role)"
		}
		return fmt.Sprintf("settled: no live member (%d listed by the map, none with a member key: nothing holds a role; rinkctl rm %s retires the rink once their leases have ended)", all, s.Rink)
	}
	balance := loadLine(s)
	if s.Settled {
		return "settled: yes, nothing moves until members, awaited roles or load change" + balance
	}
	var why []string
	if n := len(s.Waiting) + len(s.Joining); n > 0 {
		why = append(why, fmt.Sprintf("%d to be ranked", n))
	}
	if s.Announced > 0 {
		why = append(why, fmt.Sprintf("%d slots announced to warming heirs", s.Announced))
	}
	if s.LoadRound {
		why = append(why, "a load round will move slots")
	}
	for _, m := range s.Members {
		if !m.Live {
			why = append(why, "a gone member to replace")
			break
		}
	}
	for _, m := range s.Members {
		if m.Live && m.Ack != s.Version {
			why = append(why, "acknowledgements pending")
			break
		}
	}
	if len(why) == 0 {
		why = append(why, "the leader has not said it is at rest")
	}
	return "settled: no (" + strings.Join(why, ", ") + ")" + balance
}

// liveMembers counts the members of s with a live member key, and all it
// lists: ranked, waiting and joining.
func liveMembers(s rink.State) (live, all int) {
	for _, m := range s.Members {
		if m.Live {
			live++
		}
	}
	for _, w := range s.Waiting {
		if len(w.Protocols) > 0 { // (a waiting member that is gone speaks none)
			live++
		}
	}
	live += len(s.Joining)
	return live, len(s.Members) + len(s.Waiting) + len(s.Joining)
}

// loadLine says, while the leader balances by load, how the imbalance (the
// most loaded member's load per capacity over the mean) stands against
// the tolerance. A round of balancing by load moves slots only while the
// imbalance exceeds the tolerance and a slot's move would lower the most
// loaded member's load: a rink at rest above the tolerance is one in which
// no such move exists (its load sits in too few slots, a hot slot on its
// own outweighs the rest), or some member has not yet reported its load.
func loadLine(s rink.State) string {
	if s.Tolerance <= 0 && s.Imbalance <= 0 {
		return ""
	}
	tol := 1 + s.Tolerance
	switch {
	case s.Imbalance <= tol:
		return fmt.Sprintf("; load imbalance %.2f, within the tolerance %.2f", s.Imbalance, tol)
	case s.LoadRound:
		return fmt.Sprintf("; load imbalance %.2f, above the tolerance %.2f", s.Imbalance, tol)
	}
	return fmt.Sprintf("; load imbalance %.2f, above the tolerance %.2f, but no slot's move would lower the most loaded member's load (or a member has not reported its load yet), so load rounds move nothing", s.Imbalance, tol)
}

// capacity prints a member's capacity, "-" when it is gone.
func capacity(c float64) string {
	if c == 0 {
		return "-"
	}
	return strconv.FormatFloat(c, 'g', 4, 64)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// orDash prints s, or "-" when it is empty (a member that names no zone).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// protocols renders a member's protocols ("2", "2,3"), or "-".
func protocols(ps []int) string {
	if len(ps) == 0 {
		return "-"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = strconv.Itoa(p)
	}
	return strings.Join(out, ",")
}
