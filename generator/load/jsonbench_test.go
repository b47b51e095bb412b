package load

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"
	"unsafe"

	yaml "go.yaml.in/yaml/v4"
)

// specForms returns one real spec in both forms: Stripe's with every POST
// annotated, as published (YAML) and as JSON, indented or on one line;
// Adyen's as published (JSON) and as YAML.
func specForms(b *testing.B, name string) (yamlForm, jsonForm []byte) {
	b.Helper()
	switch name {
	case "stripe", "stripe-one-line":
		data, err := os.ReadFile(sharedSpec(b, "stripe-spec3.yaml"))
		if err != nil {
			b.Fatal(err)
		}
		yamlForm, _ = annotateAllPosts(b, data)
		root, err := parseYAML(yamlForm, "stripe.yaml")
		if err != nil {
			b.Fatal(err)
		}
		return yamlForm, toJSON(b, root, name == "stripe")
	default:
		jsonForm, err := os.ReadFile(sharedSpec(b, "adyen-CheckoutService-v71.json"))
		if err != nil {
			b.Fatal(err)
		}
		root, err := parseYAML(jsonForm, "adyen.json")
		if err != nil {
			b.Fatal(err)
		}
		blockStyle(root)
		yamlForm, err = yaml.Marshal(root)
		if err != nil {
			b.Fatal(err)
		}
		return yamlForm, jsonForm
	}
}

// blockStyle makes a tree written from JSON print as block-style YAML.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// BenchmarkLoadJSONvsYAML loads the same spec from YAML and from JSON in
// alternation, and reports the ratios of JSON's time and allocated bytes
// to YAML's (json/yaml-time, json/yaml-bytes); the same for the JSON read
// by the YAML parser, as it was before the JSON decoder (json-as-yaml/...);
// and what the JSON decoder allocates beyond the node tree it returns,
// against the size of the file (json-parse-beyond-tree/file).
func BenchmarkLoadJSONvsYAML(b *testing.B) {
	for _, name := range []string{"stripe", "stripe-one-line", "adyen"} {
		b.Run(name, func(b *testing.B) {
			yamlForm, jsonForm := specForms(b, name)
			loads := []func(){
				func() { mustLoad(b, yamlForm, parseTree) },
				func() { mustLoad(b, jsonForm, parseTree) },
				func() { mustLoad(b, jsonForm, parseTreeAsYAML) },
			}
			var times [3]time.Duration
			var allocs [3]uint64
			for b.Loop() {
				for i, load := range loads {
					d, n := measure(load)
					times[i] += d
					allocs[i] += n
				}
			}
			var root *yaml.Node
			_, parseBytes := measure(func() {
				var ok bool
				if root, ok = parseJSON(jsonForm); !ok {
					b.Fatal("not JSON")
				}
			})
			b.ReportMetric(float64(times[1])/float64(times[0]), "json/yaml-time")
			b.ReportMetric(float64(allocs[1])/float64(allocs[0]), "json/yaml-bytes")
			b.ReportMetric(float64(times[2])/float64(times[0]), "json-as-yaml/yaml-time")
			b.ReportMetric(float64(allocs[2])/float64(allocs[0]), "json-as-yaml/yaml-bytes")
			b.ReportMetric(float64(int64(parseBytes)-treeBytes(root))/float64(len(jsonForm)), "json-parse-beyond-tree/file")
			b.ReportMetric(float64(times[0].Milliseconds())/float64(b.N), "yaml-ms")
			b.ReportMetric(float64(times[1].Milliseconds())/float64(b.N), "json-ms")
			b.ReportMetric(float64(len(jsonForm))/float64(len(yamlForm)), "json/yaml-file")
		})
	}
}

// mustLoad loads a spec parsed by parse.
func mustLoad(b *testing.B, data []byte, parse func([]byte, string) (*tree, error)) {
	t, err := parse(data, "spec")
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := loadTree(context.Background(), t, Options{}); err != nil {
		b.Fatal(err)
	}
}

// parseTreeAsYAML is parseTree with JSON read by the YAML parser.
func parseTreeAsYAML(data []byte, file string) (*tree, error) {
	root, err := parseYAML(data, file)
	if err != nil {
		return nil, err
	}
	return prepareTree(root, file)
}

// treeBytes is the size of a tree's nodes and members.
func treeBytes(n *yaml.Node) int64 {
	size := int64(unsafe.Sizeof(*n)) + int64(len(n.Content))*int64(unsafe.Sizeof(n))
	for _, c := range n.Content {
		size += treeBytes(c)
	}
	return size
}

// measure runs f and returns its time and the bytes it allocated.
func measure(f func()) (time.Duration, uint64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	return d, after.TotalAlloc - before.TotalAlloc
}
