package idemecho

import (
	"github.com/labstack/echo/v4"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Binder returns b (echo's DefaultBinder when b is nil) that tells the
// engine, when it cannot bind a request, that the operation did not start
// executing (idem.NotExecuted): its 400 is not stored and the key is
// released, so the client's corrected retry with the same key runs. Set it
// as the Echo's Binder:
//
//	e.Binder = idemecho.Binder(e.Binder)
//
// oapi-codegen's strict server on echo then decodes each body through it
// (Context.Bind). It binds as b does, for every handler (echo's
// DefaultBinder: the path parameters, the query of a GET, DELETE or HEAD,
// then the body), so a handler of your own that calls Context.Bind gets
// the same mark: it must bind before it does anything the key's answer
// should record. A request that binds has reached its handler (Reached):
// an error returned after it is the handler's answer, and stored.
func Binder(b echo.Binder) echo.Binder {
	if b == nil {
		b = &echo.DefaultBinder{}
	}
	return binder{b}
}

type binder struct{ inner echo.Binder }

func (b binder) Bind(i any, c echo.Context) error {
	if err := b.inner.Bind(i, c); err != nil {
		idem.NotExecuted(c.Request().Context())
		return err
	}
	Reached(c)
	return nil
}
