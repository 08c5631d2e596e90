package web_test

import (
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/anvilproject/anvil/server/store"
	"github.com/anvilproject/anvil/server/store/storetest"
)

// TestSortHeadersAreWellFormed: in the node list as the browser reads
// it, each column header has at most one aria-sort and no stray
// attribute (a templ else once leaked as one), and only the sorted
// column says which way it is sorted.
func TestSortHeadersAreWellFormed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, setting string, _ *store.DB) {
		srv, _, _ := fleet(t, setting)
		root := signInAs(t, srv, "root")
		for query, want := range map[string]string{
			"sort=name&dir=desc":  "descending",
			"sort=name&dir=asc":   "ascending",
			"sort=owner&dir=desc": "descending",
			"sort=owner":          "ascending",
		} {
			st, page, _ := root.do("GET", "/nodes?"+query, nil)
			if st != 200 {
				t.Fatalf("%s: %d", query, st)
			}
			key := strings.TrimPrefix(strings.SplitN(query, "&", 2)[0], "sort=")
			sorted, headers := map[string]string{}, 0
			z := html.NewTokenizer(strings.NewReader(page))
			inTh, th := false, map[string][]string{}
			for tt := z.Next(); tt != html.ErrorToken; tt = z.Next() {
				tok := z.Token()
				switch {
				case tt == html.StartTagToken && tok.Data == "th":
					inTh, th = true, map[string][]string{}
					for _, a := range tok.Attr {
						th[a.Key] = append(th[a.Key], a.Val)
					}
					headers++
					if len(th["aria-sort"]) > 1 || th["else"] != nil {
						t.Errorf("%s: header %d has attributes %v", query, headers, th)
					}
				case tt == html.StartTagToken && tok.Data == "a" && inTh:
					for _, a := range tok.Attr {
						if a.Key == "data-sort" && th["aria-sort"] != nil {
							sorted[a.Val] = th["aria-sort"][0]
						}
					}
				case tt == html.EndTagToken && tok.Data == "th":
					inTh = false
				}
			}
			if headers < 3 || len(sorted) != 1 || sorted[key] != want {
				t.Errorf("%s: %d headers, sorted columns %v, want only %s %s", query, headers, sorted, key, want)
			}
		}
	})
}
