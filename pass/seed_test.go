package pass

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// notHeal lists the sentences of the seed that state no rule for heal, and
// why.
var notHeal = map[string]string{
	"P4.1": "names the brokers' RPC server: the plugin implements the interfaces",
	"P6.9": "the cost of a first settle on an unsealed log: the Settler's contract (see Settler.Settle)",
	"P7.1": "a heading",
}

// seedSentences splits the seed (testdata/SEED.txt, a copy of the
// specification) into paragraphs and sentences, numbered
// "P<paragraph>.<sentence>".
func seedSentences(t *testing.T) map[string]string {
	b, err := os.ReadFile("testdata/SEED.txt")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	pn := 0
	for _, para := range strings.Split(string(b), "\n\n") {
		para = strings.TrimSpace(para)
		if para == "" {
			continue
		}
		pn++
		sn := 0
		start := 0
		for i := 0; i < len(para); i++ {
			end := i == len(para)-1
			if !end && (para[i] == '.' || para[i] == '!' || para[i] == '?') && para[i+1] == ' ' && i+2 < len(para) && para[i+2] >= 'A' && para[i+2] <= 'Z' {
				end = true
			}
			if end {
				sn++
				out["P"+strconv.Itoa(pn)+"."+strconv.Itoa(sn)] = strings.TrimSpace(para[start : i+1])
				start = i + 1
			}
		}
	}
	return out
}
