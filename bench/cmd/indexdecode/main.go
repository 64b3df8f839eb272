// Command indexdecode times what the start of `agentkernel run` pays to
// find a cached image, in a fresh process as a run pays it: cache.Lookup
// ("lean": store.json and index.json decoded into generic values) against
// the same steps with the struct decoding of the full image store
// ("struct": Meta.Check and cache.ParseIndex). encoding/json's first
// decode into a struct type reflects over the type, and a Go benchmark,
// which times a process's later decodes, never sees that. Each timed
// process is this program started again to do one lookup; the two kinds
// take turns.
//
//	indexdecode -n 300 -data-dir DIR -image REF
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentkernel/agentkernel/internal/image/cache"
)

func main() {
	n := flag.Int("n", 300, "timed processes per kind")
	dataDir := flag.String("data-dir", "", "a data directory whose image store holds -image")
	ref := flag.String("image", "", "a cached image")
	child := flag.String("child", "", "internal: do one lookup of this kind and print its time")
	flag.Parse()
	if *dataDir == "" || *ref == "" {
		fmt.Fprintln(os.Stderr, "usage: indexdecode [-n N] -data-dir DIR -image REF")
		os.Exit(2)
	}
	want := cache.MetaFor(cache.DefaultIDMap())
	if *child != "" {
		start := time.Now()
		var ok bool
		var err error
		switch *child {
		case "lean":
			_, ok, err = cache.Lookup(*dataDir, *ref, want)
		case "struct":
			ok, err = structLookup(*dataDir, *ref, want)
		}
		d := time.Since(start)
		if err != nil || !ok {
			fmt.Fprintf(os.Stderr, "%s: %s not found: %v\n", *child, *ref, err)
			os.Exit(1)
		}
		fmt.Println(d.Nanoseconds())
		return
	}
	kinds := []string{"lean", "struct"}
	times := map[string][]time.Duration{}
	for range *n {
		for _, k := range kinds {
			out, err := exec.Command(os.Args[0], "-child", k, "-data-dir", *dataDir, "-image", *ref).Output()
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", k, err)
				os.Exit(1)
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %q\n", k, out)
				os.Exit(1)
			}
			times[k] = append(times[k], time.Duration(ns))
		}
	}
	fmt.Println("| lookup | processes | median | p90 |")
	fmt.Println("|---|---|---|---|")
	for _, k := range kinds {
		d := times[k]
		slices.Sort(d)
		fmt.Printf("| %s | %d | %v | %v |\n", k, len(d), d[len(d)/2].Round(time.Microsecond), d[len(d)*9/10].Round(time.Microsecond))
	}
}

// structLookup is cache.Lookup's steps with the full store's decoding.
func structLookup(dataDir, ref string, want cache.Meta) (bool, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return false, err
	}
	root := filepath.Join(abs, "images")
	data, err := os.ReadFile(filepath.Join(root, "store.json"))
	if err != nil {
		return false, err
	}
	if err := want.Check(root, data); err != nil {
		return false, err
	}
	c := cache.New(root)
	defer c.Close()
	sn, err := c.Current()
	if err != nil {
		return false, err
	}
	_, _, _, ok := sn.Resolve(ref, func(r string) (string, error) {
		if n, ok := cache.Normalize(r); ok {
			return n, nil
		}
		return "", fmt.Errorf("not normal")
	})
	return ok, nil
}
