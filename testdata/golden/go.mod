module github.com/idemgen/idemgen/testdata/golden

go 1.26.8

require github.com/idemgen/idemgen v0.0.0

replace github.com/idemgen/idemgen => ../..
