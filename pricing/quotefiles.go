package pricing

import (
	"fmt"
	"io"
	"os"
)

// ReadBookFile reads and checks a price book file, with the MIG and vGPU
// profiles' GPU-equivalent weights added from the GPU catalogue.
func ReadBookFile(path string) (*Book, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read book: %w", err)
	}
	return ParseBookFile(path, data)
}

// ParseBookFile parses and checks the price book read from path, with the
// MIG and vGPU profiles' GPU-equivalent weights added; errors name the
// file.
func ParseBookFile(path string, data []byte) (*Book, error) {
	b, err := ParseBook(data)
	if err == nil {
		b, err = WithMIGTable(b)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// ReadContractFile reads and checks a tenant contract file.
func ReadContractFile(path string) (*Contract, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read contract: %w", err)
	}
	return ParseContractFile(path, data)
}

// ParseContractFile parses and checks the contract read from path; errors
// name the file.
func ParseContractFile(path string, data []byte) (*Contract, error) {
	c, err := ParseContract(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ReadUsageFile reads a file of hourly usage rows ("-": stdin) into rows
// and where each came from (ParseUsageFile).
func ReadUsageFile(name string, stdin io.Reader) ([]Usage, []RowOrigin, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err == nil {
		var rows []Usage
		var origins []RowOrigin
		if rows, origins, err = ParseUsageFile(name, data); err == nil {
			return rows, origins, nil
		}
	}
	return nil, nil, fmt.Errorf("%s: %w", name, err)
}
