// Command release releases its executable's pages and runs on: the test
// builds it position-independent (-buildmode=pie), where the loader has
// relocated read-only data that Release must leave alone.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/everynode/everynode/internal/exepages"
)

func main() {
	n, err := exepages.Release()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Work that reads type descriptors, interface tables and function
	// pointers, which a PIE holds in relocated read-only data.
	runtime.GC()
	words := strings.Fields("the pages stay in the page cache")
	sort.Strings(words)
	var d fmt.Stringer = time.Duration(n)
	fmt.Printf("released %s worth of bytes; %s\n", d, strings.Join(words, " "))
}
