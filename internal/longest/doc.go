// Command longest measures how a Go module's code is cut: it lists the
// longest non-test functions and files and counts the context.Context
// fields kept in struct types, the figures the simplicity pass (issue
// 27) reports before and after.
//
// Usage:
//
//  1. From the module root, run `go run ./internal/longest` (or give
//     directories to measure together: `go run ./internal/longest
//     rpcshim fingerprint`).
//  2. Read the two tables: the -n longest non-test functions (from the
//     func keyword to the closing brace) and the -n longest non-test
//     files, in lines, with the file and line to open.
//  3. Read the context count: every struct field of type
//     context.Context, in non-test and in test files, each with its
//     place. The house style keeps ctx out of structs, so the goal is 0.
//
// Directories named testdata or vendor and those starting with "." or
// "_" are skipped, as the go tool skips them.
package main
