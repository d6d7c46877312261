module molens.dev/sdk/go

go 1.19
