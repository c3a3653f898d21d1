// Command testdaemon is the process in the Docker runtime tests' image (FROM
// scratch, this static binary as /testdaemon). Flags say what it does, in
// this order: probe a path, print, allocate, serve HTTP, tick, exit.
package main

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	say := flag.String("say", "", "print this line to stdout at start")
	sayErr := flag.String("stderr", "", "print this line to stderr at start")
	lines := flag.Int("lines", 0, "print this many numbered lines at start")
	every := flag.Duration("every", 0, "print a tick line this often (0: never)")
	listen := flag.String("listen", "", "serve HTTP on this address")
	exitAfter := flag.Duration("exit-after", -1, "exit after this long (negative: never)")
	exitCode := flag.Int("exit-code", 0, "exit code with -exit-after")
	ignoreTerm := flag.Bool("ignore-term", false, "ignore SIGTERM")
	allocMB := flag.Int("alloc-mb", 0, "allocate and touch this many MiB at start")
	exists := flag.String("exists", "", "exit 0 at once if this path exists, else 1 (a probe)")
	appendTo := flag.String("append", "", "FILE=LINE: append LINE to FILE at start (exit 1 if it cannot)")
	caps := flag.Bool("caps", false, "print the pid and the Cap* lines of /proc/self/status at start")
	cat := flag.String("cat", "", "print this file to stdout and exit 0 at once, 1 when unreadable (an exec)")
	flag.Parse()

	if *cat != "" {
		b, err := os.ReadFile(*cat)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Stdout.Write(b)
		os.Exit(0)
	}

	if *exists != "" {
		if _, err := os.Stat(*exists); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		os.Exit(0)
	}

	if *appendTo != "" {
		file, line, _ := strings.Cut(*appendTo, "=")
		f, err := os.OpenFile(file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = fmt.Fprintln(f, line)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "append:", err)
			os.Exit(1)
		}
	}
	if *caps {
		fmt.Printf("pid=%d uid=%d\n", os.Getpid(), os.Getuid())
		b, _ := os.ReadFile("/proc/self/status")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "Cap") {
				fmt.Println(l)
			}
		}
	}

	// Signals are caught before the first line: once -say is in the logs,
	// SIGTERM is handled (ignored with -ignore-term) and no longer kills the
	// process through the Go runtime's default.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if *say != "" {
		fmt.Println(*say)
	}
	if *sayErr != "" {
		fmt.Fprintln(os.Stderr, *sayErr)
	}
	for i := 1; i <= *lines; i++ {
		fmt.Printf("line %d\n", i)
	}
	var keep [][]byte
	for i := 0; i < *allocMB; i++ {
		b := make([]byte, 1<<20)
		for j := range b {
			b[j] = byte(j)
		}
		keep = append(keep, b)
	}
	if *exitAfter == 0 {
		os.Exit(*exitCode)
	}
	if *listen != "" {
		http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			h, _ := os.Hostname()
			fmt.Fprintf(w, "hostname=%s\nargs=%s\n", h, strings.Join(os.Args[1:], " "))
		})
		go func() {
			if err := http.ListenAndServe(*listen, nil); err != nil {
				fmt.Fprintln(os.Stderr, "listen:", err)
				os.Exit(2)
			}
		}()
	}
	if *every > 0 {
		go func() {
			for i := 1; ; i++ {
				time.Sleep(*every)
				fmt.Printf("tick %d\n", i)
			}
		}()
	}
	var timeout <-chan time.Time
	if *exitAfter > 0 {
		timeout = time.After(*exitAfter)
	}
	for {
		select {
		case s := <-sig:
			if *ignoreTerm {
				fmt.Println("ignoring", s)
				continue
			}
			fmt.Println("stopping on", s)
			os.Exit(143)
		case <-timeout:
			fmt.Println("exiting with", *exitCode, len(keep))
			os.Exit(*exitCode)
		}
	}
}
