package nvml

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// readFields reads a set of NVML field values in one call and decodes each
// as an unsigned counter. The per-field return codes come back through
// check, so NOT_SUPPORTED on one field reads as collectors.ErrNotSupported.
func (c *Collector) readFields(d *device, fv []nvml.FieldValue, ids []uint32, scope uint32, out []uint64, widths []uint) error {
	for i := range fv {
		fv[i] = nvml.FieldValue{FieldId: ids[i], ScopeId: scope}
	}
	if err := c.check("nvmlDeviceGetFieldValues", d.handle.GetFieldValues(fv)); err != nil {
		return err
	}
	for i := range fv {
		if err := c.check(fieldFunction(ids[i]), nvml.Return(fv[i].NvmlReturn)); err != nil {
			return err
		}
		v, w, err := fieldUint(fv[i])
		if err != nil {
			return err
		}
		out[i], widths[i] = v, w
	}
	return nil
}

// fieldUint decodes a field value's union by its type.
func fieldUint(f nvml.FieldValue) (uint64, uint, error) {
	b := f.Value[:]
	switch nvml.ValueType(f.ValueType) {
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return uint64(binary.NativeEndian.Uint32(b)), 32, nil
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return binary.NativeEndian.Uint64(b), 64, nil
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		v := int64(binary.NativeEndian.Uint64(b))
		if v < 0 {
			return 0, 0, fmt.Errorf("field %d: negative value %d", f.FieldId, v)
		}
		return uint64(v), 63, nil
	case nvml.VALUE_TYPE_SIGNED_INT:
		v := int32(binary.NativeEndian.Uint32(b))
		if v < 0 {
			return 0, 0, fmt.Errorf("field %d: negative value %d", f.FieldId, v)
		}
		return uint64(v), 31, nil
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return uint64(binary.NativeEndian.Uint16(b)), 16, nil
	case nvml.VALUE_TYPE_DOUBLE:
		v := math.Float64frombits(binary.NativeEndian.Uint64(b))
		if v < 0 || v != v || v >= math.MaxUint64 {
			return 0, 0, fmt.Errorf("field %d: value %v out of range", f.FieldId, v)
		}
		return uint64(v), 64, nil
	}
	return 0, 0, fmt.Errorf("field %d: unknown value type %d", f.FieldId, f.ValueType)
}

func fieldFunction(id uint32) string {
	switch id {
	case nvml.FI_DEV_PCIE_COUNT_TX_BYTES:
		return "nvmlDeviceGetFieldValues(FI_DEV_PCIE_COUNT_TX_BYTES)"
	case nvml.FI_DEV_PCIE_COUNT_RX_BYTES:
		return "nvmlDeviceGetFieldValues(FI_DEV_PCIE_COUNT_RX_BYTES)"
	case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
		return "nvmlDeviceGetFieldValues(FI_DEV_NVLINK_THROUGHPUT_DATA_TX)"
	case nvml.FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
		return "nvmlDeviceGetFieldValues(FI_DEV_NVLINK_THROUGHPUT_DATA_RX)"
	}
	return fmt.Sprintf("nvmlDeviceGetFieldValues(%d)", id)
}
