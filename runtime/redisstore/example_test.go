package redisstore_test

import (
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/idemgen/idemgen/runtime/redisstore"
)

func ExampleNew() {
	// A single server, a Sentinel group or a Cluster: any UniversalClient.
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer client.Close()
	store, err := redisstore.New(client)
	if err != nil {
		log.Fatal(err)
	}
	_ = store // idem.Config{Store: store, …}; each key is a Redis hash, so there is nothing to migrate
}
