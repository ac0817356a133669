package rpcshim

// SetWireCopy turns the in-memory transport's wire copies on or off, for
// BenchmarkInmemTransport_WireCopy. Call it before the first call.
func SetWireCopy(t *InmemTransport, on bool) { t.noWireCopy = !on }
