package filter

import (
	"fmt"
	"strings"
	"testing"

	"github.com/egridio/egrid/schemas"
)

// A long includedEventTypes is looked up in a set of folded types; it must match exactly what
// comparing each type with strings.EqualFold matches, Unicode's case-folding orbits included
// (the Kelvin sign, the long s, the three sigmas), and invalid UTF-8 as EqualFold reads it.
func TestLongIncludedEventTypesMatchAsEqualFold(t *testing.T) {
	types := []string{"Contoso.Orders.OrderCreated", "kelvin", "Straße.ſ", "ΣΊΣΥΦΟΣ", "naïve", "a\xffb", "x"}
	for i := len(types); i <= typeScan; i++ {
		types = append(types, fmt.Sprintf("Filler.Type%d", i))
	}
	f, err := Compile(Spec{IncludedEventTypes: types}, schemas.EventGrid)
	if err != nil {
		t.Fatal(err)
	}
	if f.typeSet == nil {
		t.Fatalf("%d types compiled without a set", len(types))
	}
	events := []string{
		"contoso.orders.ordercreated", "CONTOSO.ORDERS.ORDERCREATED", "Contoso.Orders.OrderCreate",
		"\u212Aelvin", "KELVIN", "kelvi", "STRASSE.S", "straße.s", "STRAßE.Ş", "Straße.S",
		"σίσυφος", "σίσυφοσ", "ΣΊΣΥΦΟς", "NAÏVE", "naive", "a\uFFFDb", "A\xfeB", "X", "xx", "",
		"filler.type9", "Filler.Type" + fmt.Sprint(typeScan), "Filler.Type99",
	}
	for _, ev := range events {
		want := false
		for _, ty := range types {
			want = want || strings.EqualFold(ty, ev)
		}
		if got := f.Match(&schemas.Event{Type: ev}); got != want {
			t.Errorf("Match(type %q) = %v, want %v (strings.EqualFold against the list)", ev, got, want)
		}
	}
}

// A matched event's type lookup allocates nothing for a type of up to 128 bytes.
func TestLongIncludedEventTypesAllocateNothing(t *testing.T) {
	types := make([]string, 1000)
	for i := range types {
		types[i] = fmt.Sprintf("Contoso.Orders.Type%d", i)
	}
	f, err := Compile(Spec{IncludedEventTypes: types}, schemas.EventGrid)
	if err != nil {
		t.Fatal(err)
	}
	ev := &schemas.Event{Type: "CONTOSO.ORDERS.TYPE999"}
	if n := testing.AllocsPerRun(100, func() {
		if !f.Match(ev) {
			t.Fatal("no match")
		}
	}); n != 0 {
		t.Errorf("%v allocations per match, want 0", n)
	}
}

// BenchmarkIncludedEventTypes matches an event whose type is the last of n.
func BenchmarkIncludedEventTypes(b *testing.B) {
	for _, n := range []int{4, 8, 9, 1000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			types := make([]string, n)
			for i := range types {
				types[i] = fmt.Sprintf("Contoso.Orders.Type%d", i)
			}
			f, err := Compile(Spec{IncludedEventTypes: types}, schemas.EventGrid)
			if err != nil {
				b.Fatal(err)
			}
			ev := &schemas.Event{Type: types[n-1]}
			for b.Loop() {
				if !f.Match(ev) {
					b.Fatal("no match")
				}
			}
		})
	}
}
