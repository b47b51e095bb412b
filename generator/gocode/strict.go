package gocode

import "github.com/dave/jennifer/jen"

// strictRequestErrorName is the function the strict-server glue declares.
const strictRequestErrorName = "StrictRequestError"

// emitStrictGlue writes what an oapi-codegen strict server needs besides
// the transaction accessors: the handler of the requests its generated
// code cannot decode, which answers as oapi-codegen's default does and
// tells the engine that the operation did not start executing, so that
// the 400 is not the key's answer for its whole TTL.
func emitStrictGlue(f *jen.File) {
	comment(f, strictRequestErrorName+" answers a request that oapi-codegen's generated server could not decode or bind (its body, a parameter) with 400 and err's text, as oapi-codegen's default does, "+
		"and tells the idempotency engine that the operation did not start executing: the answer is not stored and the key is released, so the client's corrected retry with the same key runs. "+
		"Give it as StrictHTTPServerOptions.RequestErrorHandlerFunc and as the ErrorHandlerFunc of ChiServerOptions or StdHTTPServerOptions.", 77)
	f.Func().Id(strictRequestErrorName).Params(
		jen.Id("w").Qual(pathHTTP, "ResponseWriter"),
		jen.Id("r").Op("*").Qual(pathHTTP, "Request"),
		jen.Id("err").Error(),
	).Block(
		jen.Qual(pathIdem, "NotExecuted").Call(jen.Id("r").Dot("Context").Call()),
		jen.Qual(pathHTTP, "Error").Call(jen.Id("w"), jen.Id("err").Dot("Error").Call(), jen.Qual(pathHTTP, "StatusBadRequest")),
	)
}
