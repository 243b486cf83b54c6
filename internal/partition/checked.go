package partition

import "fmt"

// ReadChecked reads the YAML file at path into v (a *Fleet, *Demand or
// *Plan) and validates it; every error names the file.
func ReadChecked(path string, v interface{ Validate() error }) error {
	if err := ReadFile(path, v); err != nil {
		return err
	}
	if err := v.Validate(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// WriteFiles writes the plan (the input of `mig apply`) to planPath and its
// mig-parted config to migPartedPath; an empty path writes nothing.
func (p Plan) WriteFiles(planPath, migPartedPath string) error {
	if planPath != "" {
		if err := WriteFile(planPath, p); err != nil {
			return err
		}
	}
	if migPartedPath == "" {
		return nil
	}
	cfg, err := p.MIGParted()
	if err != nil {
		return err
	}
	return WriteFile(migPartedPath, cfg)
}
