package nvml

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpumeter/gpumeter/collectors"
)

// ErrGPULost marks a GPU that fell off the bus (NVML_ERROR_GPU_IS_LOST).
var ErrGPULost = errors.New("gpu is lost")

// ErrLibraryNotFound means libnvidia-ml is not installed or not on the
// library path.
var ErrLibraryNotFound = errors.New("nvml library not found")

// Error is a failed NVML call. The nvml.Return stays inside this package;
// callers test for collectors.ErrNotSupported, collectors.ErrNoData,
// ErrGPULost or ErrLibraryNotFound with errors.Is.
type Error struct {
	Function string // NVML function, e.g. "nvmlDeviceGetTotalEnergyConsumption"
	Code     string // return code name, e.g. "ERROR_GPU_IS_LOST"
	ret      nvml.Return
}

func (e *Error) Error() string {
	msg := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(e.Code, "ERROR_"), "_", " "))
	return fmt.Sprintf("%s: %s", e.Function, msg)
}

// Is maps NVML return codes onto the project's sentinels.
func (e *Error) Is(target error) bool {
	switch target {
	case collectors.ErrNotSupported:
		return e.ret == nvml.ERROR_NOT_SUPPORTED || e.ret == nvml.ERROR_FUNCTION_NOT_FOUND
	case collectors.ErrNoData:
		return e.ret == nvml.ERROR_NOT_FOUND || e.ret == nvml.ERROR_NO_DATA
	case ErrGPULost:
		return e.ret == nvml.ERROR_GPU_IS_LOST || e.ret == nvml.ERROR_GPU_NOT_FOUND
	case ErrLibraryNotFound:
		return e.ret == nvml.ERROR_LIBRARY_NOT_FOUND
	}
	return false
}

// Metrics receives every NVML call that failed; cmd/gpumeter counts them by
// function and code.
type Metrics interface {
	NVMLError(function, code string)
}

type nopMetrics struct{}

func (nopMetrics) NVMLError(string, string) {}

// check turns a return code into an error and counts it. Codes in expected
// are normal answers for this call (NOT_FOUND from an empty MIG slot) and
// are neither counted nor errors, but still returned as *Error so the
// caller can branch on them.
func (c *Collector) check(function string, ret nvml.Return, expected ...nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	err := &Error{Function: function, Code: codeName(ret), ret: ret}
	for _, e := range expected {
		if ret == e {
			return err
		}
	}
	c.metrics.NVMLError(function, err.Code)
	return err
}

// codeName names a return code without asking the library, which may not
// be loaded (and whose own strings are prose, unfit for metric labels).
func codeName(ret nvml.Return) string {
	switch ret {
	case nvml.SUCCESS:
		return "SUCCESS"
	case nvml.ERROR_UNINITIALIZED:
		return "ERROR_UNINITIALIZED"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "ERROR_INVALID_ARGUMENT"
	case nvml.ERROR_NOT_SUPPORTED:
		return "ERROR_NOT_SUPPORTED"
	case nvml.ERROR_NO_PERMISSION:
		return "ERROR_NO_PERMISSION"
	case nvml.ERROR_NOT_FOUND:
		return "ERROR_NOT_FOUND"
	case nvml.ERROR_INSUFFICIENT_SIZE:
		return "ERROR_INSUFFICIENT_SIZE"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "ERROR_DRIVER_NOT_LOADED"
	case nvml.ERROR_TIMEOUT:
		return "ERROR_TIMEOUT"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "ERROR_LIBRARY_NOT_FOUND"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "ERROR_FUNCTION_NOT_FOUND"
	case nvml.ERROR_GPU_IS_LOST:
		return "ERROR_GPU_IS_LOST"
	case nvml.ERROR_RESET_REQUIRED:
		return "ERROR_RESET_REQUIRED"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "ERROR_LIB_RM_VERSION_MISMATCH"
	case nvml.ERROR_GPU_NOT_FOUND:
		return "ERROR_GPU_NOT_FOUND"
	case nvml.ERROR_NO_DATA:
		return "ERROR_NO_DATA"
	case nvml.ERROR_IN_USE:
		return "ERROR_IN_USE"
	case nvml.ERROR_MEMORY:
		return "ERROR_MEMORY"
	case nvml.ERROR_UNKNOWN:
		return "ERROR_UNKNOWN"
	}
	return fmt.Sprintf("ERROR_%d", int32(ret))
}
