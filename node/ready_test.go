package node

import (
	"reflect"
	"testing"
)

// TestReadyEmptyCoversEveryField sets each field of a Ready in turn to
// something and checks that Ready.empty sees it, so that HasReady cannot
// drift from Ready when a field is added.
func TestReadyEmptyCoversEveryField(t *testing.T) {
	if rd := (Ready{}); !rd.empty() {
		t.Fatal("the zero Ready is not empty")
	}
	typ := reflect.TypeFor[Ready]()
	for i := range typ.NumField() {
		var rd Ready
		setNonZero(t, reflect.ValueOf(&rd).Elem().Field(i))
		if rd.empty() {
			t.Errorf("Ready.%s is set but Ready.empty does not see it", typ.Field(i).Name)
		}
	}
}

// setNonZero makes v something other than its zero value, as deep as a
// struct needs (a struct is set through its first field that is set,
// which is how reservation.Batch.Empty looks at Changes).
func setNonZero(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.String:
		v.SetString("x")
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() && v.Field(i).Kind() == reflect.Slice {
				setNonZero(t, v.Field(i))
				return
			}
		}
		t.Fatalf("cannot set a %s", v.Type())
	default:
		t.Fatalf("Ready has a field of kind %s: teach setNonZero and Ready.empty about it", v.Kind())
	}
}
