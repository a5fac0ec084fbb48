package mirrorsync

// Remembered is how many members the writer remembers in memory for repair, and
// whether the list overflowed (a rewrite of every record at the next round).
func (w *Writer) Remembered() (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.failed), w.overflow
}
