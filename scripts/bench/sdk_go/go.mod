module molens.dev/bench/sdkgo

go 1.19

require molens.dev/sdk/go v0.0.0

replace molens.dev/sdk/go => ../../../sdk/go
