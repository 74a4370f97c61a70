package actors

import cmap "github.com/orcaman/concurrent-map"

// protoactor's process registry spreads an actor system's PIDs over 1 024 maps of
// orcaman/concurrent-map, and each of those splits its keys again over SHARD_COUNT Go maps
// (32 by default): 32 768 maps, so nearly every actor spawned landed in an empty one and paid
// for that map's first group of slots — about 400 B of an idle subscription's ~3 KB, for
// an entry of two words — and every actor system started with 32 768 empty maps (~2.6 MB).
// With one shard per map the registry keeps protoactor's 1 024 locks, fills its maps, and an
// entry costs what the map's slots cost (TestRegistryEntriesAreSmall). The setting is the
// package's: it applies to every concurrent-map made after this package is initialised, in
// any package of the program (egrid's only user of it is protoactor).
func init() { cmap.SHARD_COUNT = 1 }
