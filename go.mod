module github.com/nodeshim/nodeshim

go 1.25.0

require (
	github.com/checkpoint-restore/go-criu/v7 v7.2.0
	github.com/spf13/cobra v1.10.2
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.38.0
	google.golang.org/protobuf v1.34.2
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/kr/text v0.2.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
)
