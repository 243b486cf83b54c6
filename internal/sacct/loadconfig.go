package sacct

import "github.com/gpumeter/gpumeter/collectors/attribution"

// LoadConfig reads a backfill's files: the GRES → SKU map (skuMap) and
// the collector's map file (mapFile), whose account lines map Slurm
// accounts to tenants and departments; an empty path reads nothing.
func LoadConfig(skuMap, mapFile string, accountIsTenant bool) (Config, error) {
	cfg := Config{Tenancy: attribution.Tenancy{AccountIsTenant: accountIsTenant}}
	var err error
	if skuMap != "" {
		if cfg.SKUs, err = LoadSKUMap(skuMap); err != nil {
			return cfg, err
		}
	}
	if mapFile != "" {
		cfg.Tenancy.Mapping, err = attribution.LoadMapping(mapFile)
	}
	return cfg, err
}
