package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	n := flag.Int("n", 15, "rows per table")
	flag.Parse()
	dirs := flag.Args()
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	var all report
	for _, dir := range dirs {
		r, err := measure(os.DirFS(dir))
		if err != nil {
			fmt.Fprintln(os.Stderr, "longest:", err)
			os.Exit(1)
		}
		all.merge(r, dir)
	}
	all.print(os.Stdout, *n)
}
