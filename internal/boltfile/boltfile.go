package boltfile

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Meta and FormatKey name the bucket and key of the layout version.
var (
	Meta      = []byte("meta")
	FormatKey = []byte("format")
)

// Create makes a new file `what` (e.g. "a reservation store"): the meta
// bucket with format, and the data buckets. A file that already has
// buckets, but no meta bucket, belongs to something else and is refused.
func Create(tx *bolt.Tx, what, format string, buckets ...[]byte) error {
	var names []string
	if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
		names = append(names, fmt.Sprintf("%q", name))
		return nil
	}); err != nil {
		return fmt.Errorf("read buckets: %w", err)
	}
	if len(names) > 0 {
		return fmt.Errorf("not %s: no %q bucket, but buckets %v", what, Meta, names)
	}
	meta, err := tx.CreateBucket(Meta)
	if err != nil {
		return fmt.Errorf("create bucket %q: %w", Meta, err)
	}
	if err := meta.Put(FormatKey, []byte(format)); err != nil {
		return fmt.Errorf("write format: %w", err)
	}
	for _, b := range buckets {
		if _, err := tx.CreateBucket(b); err != nil {
			return fmt.Errorf("create bucket %q: %w", b, err)
		}
	}
	return nil
}
