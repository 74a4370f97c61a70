//go:build !unix

package httpserver

// DefaultConnections is the default of [Config.MaxConnections]: [DefaultMaxConnections] (this
// platform has no open-file limit to bound it by).
func DefaultConnections() int { return DefaultMaxConnections }
