// Package httpserver hardens the HTTP server in front of an egrid [http.Handler]: the limits
// that keep slow, idle and too many clients from holding file descriptors and memory (SPEC §8:
// "the HTTP server bounds header, body and idle time and concurrent connections").
//
// The model, one bound per resource a client can hold:
//
//   - time to send the request headers: [Config.ReadHeaderTimeout] (it also bounds the TLS
//     handshake and a connection that never sends a byte);
//   - time to send a request body: [Config.BodyTimeout] on top of the header time (the server's
//     ReadTimeout is their sum; net/http lifts that deadline once the body has been read, so a
//     publish waiting for its fsync is not cut);
//   - time a kept-alive connection may sit between requests: [Config.IdleTimeout];
//   - header size: [Config.MaxHeaderBytes];
//   - open connections: [Config.MaxConnections], enforced by [LimitListener], which stops
//     accepting at the limit (new connections wait in the kernel's listen backlog, and are
//     refused by the kernel once it is full) so the server never runs out of file descriptors
//     that the store and outgoing deliveries need;
//   - publish bodies in memory: [Config.MaxPublishBodies] requests at once, enforced by a
//     [BodyLimit] the handler admits its requests to once they are authenticated and about to
//     read their bodies (or by [LimitBodies], on arrival, for a handler that does not); a
//     request that finds no slot within [Config.PublishWait] is answered 429 with
//     Retry-After, as Event Grid does when it sheds load (SPEC §1.1);
//   - long polls (pull delivery's :receive, up to 120 s each): [Config.MaxReceivePolls] waiting
//     at once in the server, at most half of them on one event subscription, enforced by a
//     [PollLimit] the handler admits its polls to once they are authenticated and about to
//     wait; a poll over the bound is answered 429 at once;
//   - requests in progress on one HTTP/2 connection: [MaxConcurrentStreams];
//   - time an answer waits for its client to read it: [AnswerStall] per write of up to 64 KiB,
//     enforced by [BoundAnswers] (there is no overall write timeout: long polls and replay
//     progress streams take as long as they take before and between their writes).
//
// [New] puts them all together but the long polls' and the publish bodies' (unless
// [Requests.Publish] selects them), which the handler applies. The package is
// independent of the router: it imports no egrid package, and wraps any handler.
package httpserver
