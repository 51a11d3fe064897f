"""moeroof.present"""
