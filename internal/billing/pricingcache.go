package billing

import (
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
)

// PricingCache keeps customers' price books and contracts parsed, so that
// requests (cost, tenants, quota spend) do not read and parse YAML each
// time, and re-reads a file as soon as it changes (its size or
// modification time), so an edited book is used without a restart. A file
// that fails to load is not cached: the next request tries again.
type PricingCache struct {
	stat     func(string) (fs.FileInfo, error)
	readFile func(string) ([]byte, error)

	mu      sync.Mutex
	entries map[[2]string]pricingEntry
}

type pricingEntry struct {
	stamps   [2]fileStamp // book, contract
	book     *pricing.Book
	contract *pricing.Contract
}

type fileStamp struct {
	size    int64
	modTime time.Time
}

// NewPricingCache reads files from disk.
func NewPricingCache() *PricingCache {
	return &PricingCache{stat: os.Stat, readFile: os.ReadFile, entries: map[[2]string]pricingEntry{}}
}

// Pricing is LoadPricing, from the cache while the files are unchanged.
func (c *PricingCache) Pricing(cust Customer) (*pricing.Book, *pricing.Contract, error) {
	key := [2]string{cust.Book, cust.Contract}
	var stamps [2]fileStamp
	for i, path := range key {
		if path == "" {
			continue
		}
		fi, err := c.stat(path)
		if err != nil {
			// LoadPricing names the file and the problem.
			return LoadPricing(cust, c.readFile)
		}
		stamps[i] = fileStamp{size: fi.Size(), modTime: fi.ModTime()}
	}
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && e.stamps == stamps {
		return e.book, e.contract, nil
	}
	book, contract, err := LoadPricing(cust, c.readFile)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	c.entries[key] = pricingEntry{stamps: stamps, book: book, contract: contract}
	c.mu.Unlock()
	return book, contract, nil
}
