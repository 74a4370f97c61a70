// Package secretfile reads secrets from files: the admin token file, the MinIO secret key
// file, the TLS private key, the store's secret key and the files of the config's
// ${file:PATH} references are all read by [Read].
//
// The model: a secret file is opened once, and everything egrid learns about it comes from
// that open descriptor — its kind and permissions from fstat, its content from reading it. A
// check by path followed by a read by path could judge one file and read another, the path
// being swapped between the two; here the file judged is the file read.
//
// Only a regular file of at most [MaxSize] bytes is read. Anything else is an error saying
// what the path names: a named pipe would hold the start until something writes to it (on
// unix the file is opened without waiting for a writer, and refused), a directory or a
// device is not a file that holds a secret, and a file over the limit is not one either (a
// log, a disk image).
//
// What a mode open to group or others means is the caller's policy, judged with [Exposed]:
// the store refuses such a secret key, serve warns of its other secret files and uses them.
//
// secretfile imports no other egrid package.
package secretfile
