// Command standin stands in for the programs of published DaemonSet
// manifests in the Docker tests: whatever its name and arguments, it prints
// them with its environment's names, then runs until SIGTERM. The image
// copies it to each path a manifest's command names. Run as "standin cat
// FILE" (an exec) it prints FILE.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "cat" {
		b, err := os.ReadFile(os.Args[2])
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var names []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Printf("standin as %q, env %s\n", os.Args, strings.Join(names, ","))
	<-sig
}
