package bench

import (
	"fmt"
	"image/color"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/rink-go/rink"
)

// plotHoldings draws, from a run's events, how many of the given roles each
// member held over time from start on, and saves it as a PNG.
func plotHoldings(path, title string, events []rink.Event, rs []string, start time.Time) error {
	perSlot := map[int]int{}
	for _, r := range rs {
		perSlot[slotOf(r)]++
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	held := map[string]int{}
	slots := map[string]map[int]bool{}
	series := map[string]plotter.XYs{}
	var order []string
	point := func(member string, t time.Time) {
		if _, ok := series[member]; !ok {
			order = append(order, member)
			if t.After(start) { // its line starts where the window starts
				series[member] = plotter.XYs{{X: 0, Y: 0}}
			}
		}
		series[member] = append(series[member], plotter.XY{X: float64(t.Sub(start)) / float64(time.Millisecond), Y: float64(held[member])})
	}
	started := false
	var last time.Time
	for _, e := range events {
		if !started && e.Time.After(start) {
			started = true
			for m := range held { // every member's holdings when the window opens
				if held[m] > 0 {
					point(m, start)
				}
			}
		}
		if slots[e.Member] == nil {
			slots[e.Member] = map[int]bool{}
		}
		before := held[e.Member]
		switch e.Kind {
		case rink.EventAcquired:
			if !slots[e.Member][e.Slot] {
				slots[e.Member][e.Slot] = true
				held[e.Member] += perSlot[e.Slot]
			}
		case rink.EventReleased:
			if slots[e.Member][e.Slot] {
				delete(slots[e.Member], e.Slot)
				held[e.Member] -= perSlot[e.Slot]
			}
		case rink.EventFenced:
			for s := range slots[e.Member] {
				held[e.Member] -= perSlot[s]
			}
			slots[e.Member] = map[int]bool{}
		}
		if started && held[e.Member] != before {
			point(e.Member, e.Time.Add(-time.Nanosecond)) // keep steps square
			series[e.Member][len(series[e.Member])-1].Y = float64(before)
			point(e.Member, e.Time)
			last = e.Time
		}
	}
	for m, xy := range series { // extend every line to the end of the window
		series[m] = append(xy, plotter.XY{X: float64(last.Sub(start)+5*time.Millisecond) / float64(time.Millisecond), Y: xy[len(xy)-1].Y})
	}
	sort.Strings(order)
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "milliseconds since the first newcomer joined"
	p.Y.Label.Text = "roles held"
	p.Legend.Top = true
	palette := []color.RGBA{{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
		{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}}
	top := 0.0
	for _, xy := range series {
		for _, pt := range xy {
			top = max(top, pt.Y)
		}
	}
	p.Y.Min, p.Y.Max = 0, 1.7*top // room above the lines for the legend
	p.Legend.Left = true
	for i, name := range order {
		line, err := plotter.NewLine(series[name])
		if err != nil {
			return err
		}
		line.Color = palette[i%len(palette)]
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(name, line)
	}
	if err := p.Save(9*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("saving plot: %w", err)
	}
	return nil
}
